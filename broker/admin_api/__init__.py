"""The cluster and configuration APIs: ApiVersions, Metadata, topic creation and deletion,
partitions, DescribeConfigs and the AlterConfigs pair."""
