"""The data plane: the topic registry and its partition logs, Produce/Fetch/ListOffsets, the
appender and the shared fsync (group commit), retention and DeleteRecords, topic configs and
names, DescribeProducers."""
