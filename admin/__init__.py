"""The command-line tools for consumer-group administration: Kafka clients, not the server.

``kcoord groups ...`` and ``kcoord offsets ...`` (``kcoord/cli.py`` adds them to the ``kcoord``
command through :mod:`admin.cli`) are ordinary Kafka admin clients (librdkafka's AdminClient:
ListGroups, DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups, Metadata), so
they work against Apache Kafka as well as kcoord. OffsetDelete, which the AdminClient of
confluent-kafka does not expose, is sent directly to the group's coordinator with the codecs of
``protocol/``. Nothing here imports the broker, and the broker imports nothing here but the
parser hook of :mod:`admin.cli`; confluent-kafka is imported only when a command runs.

Modules: ``cli`` (the subcommands' arguments and dispatch), ``client`` (the admin calls, over
the AdminClient and one raw request), ``groups`` (``kcoord groups list|describe|delete``),
``offsets`` (``kcoord offsets reset|delete``), ``output`` (tables, JSON and notes as
kafka-consumer-groups.sh prints them), ``group_flags`` (kafka-consumer-groups.sh's own flags),
``topics`` and ``topic_commands`` (``kcoord topics ...``), ``produce`` and ``consume`` (kcat-like
``kcoord produce|consume``), and the share-group, transaction and cluster commands.
"""

COMMANDS = ("groups", "offsets", "share", "topics", "transactions", "cluster", "produce", "consume")
"""The ``kcoord`` commands of this package (the entry point runs them without the broker's
modules: kcoord/entry.py)."""
