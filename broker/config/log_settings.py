"""The broker settings that are topics' defaults: Kafka's broker synonyms of the topic configs
(``broker/data/topic_config_defs.py``) that are not settings of another part of the broker
(``log.segment.bytes``, ``message.max.bytes``, ``log.cleaner.delete.retention.ms``, ... are in
``settings``). A topic's own config overrides each."""

from __future__ import annotations

from .setting import Setting

LOG_SETTINGS: list[Setting] = [
    Setting(
        "log.cleanup.policy",
        str,
        "delete",
        "Default cleanup.policy of topics: delete (retention), compact, or compact,delete.",
        choices=("compact", "delete"),
    ),
    Setting(
        "log.retention.ms",
        int,
        604800000,
        "Default retention.ms of topics: segments with only older records are deleted;"
        " -1: no time limit.",
        -1,
    ),
    Setting(
        "log.retention.bytes",
        int,
        -1,
        "Default retention.bytes of topics: oldest segments go while a partition stays at"
        " least this big; -1: no size limit.",
        -1,
    ),
    Setting(
        "log.roll.ms",
        int,
        604800000,
        "Default segment.ms of topics (__consumer_offsets too): roll the active segment once"
        " its first record is this old.",
        1,
    ),
    Setting(
        "log.retention.check.interval.ms",
        int,
        300000,
        "How often segments are rolled by time and deleted by retention.",
        1,
    ),
    Setting(
        "compression.type",
        str,
        "producer",
        "Default compression.type of topics: producer (batches stored as produced) or the codec"
        " batches are stored with: uncompressed, gzip, snappy, lz4, zstd.",
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        single=True,
    ),
    Setting(
        "compression.gzip.level",
        int,
        -1,
        "Default compression.gzip.level of topics: 1..9, or -1 (zlib's default).",
        -1,
        maximum=9,
    ),
    Setting(
        "compression.lz4.level",
        int,
        9,
        "Default compression.lz4.level of topics: 1..17.",
        1,
        maximum=17,
    ),
    Setting(
        "compression.zstd.level",
        int,
        3,
        "Default compression.zstd.level of topics: -131072..22.",
        -131072,
        maximum=22,
    ),
    Setting(
        "min.insync.replicas",
        int,
        1,
        "Default min.insync.replicas of topics (kcoord keeps one replica per partition).",
        1,
    ),
    Setting(
        "log.message.timestamp.type",
        str,
        "CreateTime",
        "Default message.timestamp.type of topics: CreateTime (the producer's timestamps) or"
        " LogAppendTime (the broker's clock at append).",
        choices=("CreateTime", "LogAppendTime"),
        single=True,
    ),
    Setting(
        "log.message.timestamp.before.max.ms",
        int,
        2**63 - 1,
        "Default message.timestamp.before.max.ms of topics: how far before the broker's clock"
        " a CreateTime record may be timestamped.",
        0,
    ),
    Setting(
        "log.message.timestamp.after.max.ms",
        int,
        3_600_000,
        "Default message.timestamp.after.max.ms of topics: how far after the broker's clock a"
        " CreateTime record may be timestamped.",
        0,
    ),
    # Kafka's broker synonyms of topic configs kcoord accepts without acting on them: listed
    # (DescribeConfigs, ``kcoord config``) and settable so that topics' defaults follow them.
    Setting("log.roll.jitter.ms", int, 0, "Default segment.jitter.ms of topics (no effect).", 0),
    Setting(
        "log.index.size.max.bytes",
        int,
        10 << 20,
        "Default segment.index.bytes of topics (no effect: kcoord sizes its indexes itself).",
        4,
    ),
    Setting(
        "log.flush.interval.ms",
        int,
        2**63 - 1,
        "Default flush.ms of topics (no effect: log.flush.interval.messages decides).",
        0,
    ),
    Setting(
        "log.segment.delete.delay.ms",
        int,
        60000,
        "Default file.delete.delay.ms of topics (no effect: segments go at once).",
        0,
    ),
    Setting(
        "log.cleaner.min.compaction.lag.ms",
        int,
        0,
        "Default min.compaction.lag.ms of topics (no effect).",
        0,
    ),
    Setting(
        "log.cleaner.max.compaction.lag.ms",
        int,
        2**63 - 1,
        "Default max.compaction.lag.ms of topics (no effect).",
        1,
    ),
    Setting(
        "log.cleaner.min.cleanable.ratio",
        float,
        0.5,
        "Default min.cleanable.dirty.ratio of topics (no effect).",
        0,
        maximum=1,
    ),
    Setting("log.preallocate", bool, False, "Default preallocate of topics (no effect)."),
    Setting(
        "unclean.leader.election.enable",
        bool,
        False,
        "Default unclean.leader.election.enable of topics (no effect: one replica).",
    ),
    Setting(
        "log.local.retention.ms",
        int,
        -2,
        "Default local.retention.ms of topics (no effect: no tiered storage).",
        -2,
    ),
    Setting(
        "log.local.retention.bytes",
        int,
        -2,
        "Default local.retention.bytes of topics (no effect: no tiered storage).",
        -2,
    ),
]
