"""Every setting: its name, type, default and checks (the topics' defaults are in
``log_settings``); parsing one value."""

from __future__ import annotations

import difflib
from typing import Any

from .log_settings import LOG_SETTINGS
from .setting import ConfigError, Setting, is_secret_name

__all__ = ["SETTINGS", "ConfigError", "Setting", "is_secret_name", "parse_value", "unknown_setting"]

_INT_MAX = 2**31 - 1

SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        *LOG_SETTINGS,
        Setting("node.id", int, 0, "This broker's node id (also the controller id).", 0),
        Setting(
            "broker.heartbeat.interval.ms",
            int,
            2000,
            "Cluster mode (storage.url on PostgreSQL): how often a node renews its session and"
            " looks at who leads what.",
            10,
        ),
        Setting(
            "broker.session.timeout.ms",
            int,
            9000,
            "Cluster mode: a node whose session was not renewed for this long (by the"
            " database's clock) is dead, and its partitions are taken over.",
            100,
        ),
        Setting("broker.rack", str, "", "This node's rack (Metadata; empty: none)."),
        Setting(
            "listeners",
            str,
            "",
            "NAME://host:port,... to listen on (e.g. PLAINTEXT://127.0.0.1:9092,SSL://0.0.0.0:9093);"
            " empty means one PLAINTEXT listener on --host/--port.",
        ),
        Setting(
            "advertised.listeners",
            str,
            "",
            "NAME://host:port per listener clients are told to connect to (host:port alone: the"
            " first listener's); empty means each listener's own address.",
        ),
        Setting(
            "listener.security.protocol.map",
            str,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "NAME:PROTOCOL per listener name.",
        ),
        Setting("ssl.keystore.type", str, "PEM", "Only PEM (KIP-651)."),
        Setting(
            "ssl.keystore.location", str, "", "PEM file with the private key and certificate chain."
        ),
        Setting("ssl.key.password", str, "", "Password of an encrypted private key."),
        Setting("ssl.truststore.type", str, "PEM", "Only PEM (KIP-651)."),
        Setting("ssl.truststore.location", str, "", "PEM file of the CAs trusted for client certificates."),
        Setting("ssl.client.auth", str, "none", "none, requested or required: client certificates."),
        Setting("max.connections", int, _INT_MAX, "Most connections over all listeners.", 1),
        Setting("max.connections.per.ip", int, _INT_MAX, "Most connections from one address.", 1),
        Setting(
            "max.connections.per.ip.overrides",
            str,
            "",
            "host:count,... exceptions to max.connections.per.ip.",
        ),
        Setting(
            "connections.max.idle.ms",
            int,
            600000,
            "A connection that sends nothing for this long is closed.",
            1,
        ),
        Setting(
            "sasl.enabled.mechanisms",
            str,
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "SASL mechanisms offered on SASL listeners (OAUTHBEARER: unsecured development"
            " tokens, never for production).",
            choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        ),
        Setting(
            "connection.failed.authentication.delay.ms",
            int,
            100,
            "How long after a failed SASL login is answered its connection is closed (the"
            " connection reads nothing more meanwhile).",
            0,
        ),
        Setting(
            "authorizer.class.name",
            str,
            "",
            "Empty: no ACLs, everything is allowed. kcoord's ACL authorizer under any non-empty"
            " name (Kafka's org.apache.kafka.metadata.authorizer.StandardAuthorizer carries over).",
        ),
        Setting("super.users", str, "", "Principals allowed everything: User:admin;User:ops."),
        Setting(
            "allow.everyone.if.no.acl.found",
            bool,
            False,
            "With the authorizer on: allow an operation on a resource that has no ACL at all.",
        ),
        Setting("auto.create.topics.enable", bool, True, "Create unknown topics on Metadata."),
        Setting("num.partitions", int, 1, "Partitions of an auto-created topic.", 1),
        Setting("default.replication.factor", int, 1, "Replication factor (a single node: 1).", 1),
        Setting("log.segment.bytes", int, 1 << 30, "Roll a segment past this size.", 1024),
        Setting("log.index.interval.bytes", int, 4096, "Bytes of log between index entries.", 1),
        Setting(
            "log.flush.interval.messages",
            int,
            1,
            "1 (default): fsync before acknowledging a write. Larger: leave flushing to the OS.",
            1,
        ),
        Setting(
            "message.max.bytes",
            int,
            1048588,
            "Largest record batch a Produce may carry, and a coordinator write may append to"
            " __consumer_offsets.",
            0,
        ),
        Setting("socket.request.max.bytes", int, 104857600, "Largest request frame accepted.", 1),
        Setting(
            "socket.request.max.elements",
            int,
            100000,
            "Most array entries one request may hold (all arrays together); more closes the"
            " connection before the request is decoded.",
            1,
        ),
        Setting(
            "socket.request.receive.timeout.ms",
            int,
            30000,
            "Longest time a request may take to arrive once its first byte has; slower ones close"
            " the connection.",
            1,
        ),
        Setting(
            "queued.max.request.bytes",
            int,
            134217728,
            "Bytes of large requests (over 64 KiB) being received or waiting to be handled, over"
            " all connections; past it a connection waits before reading more. -1: no limit.",
            -1,
        ),
        Setting(
            "queued.max.requests",
            int,
            500,
            "Requests one connection may have received and not yet answered; past it the broker"
            " stops reading from that connection until answers go out.",
            1,
        ),
        Setting(
            "max.broker.partitions",
            int,
            10000,
            "Most partitions this node holds, __consumer_offsets included; creating more fails"
            " with POLICY_VIOLATION.",
            1,
        ),
        Setting(
            "max.partitions.per.request",
            int,
            4000,
            "Most partitions one CreateTopics or CreatePartitions request may create.",
            1,
        ),
        Setting(
            "storage.url",
            str,
            "",
            "Where everything durable lives: empty or file: for the data directory (the files"
            " engine), postgresql://USER[:PASSWORD]@HOST[:PORT]/DB for a PostgreSQL database.",
            secret=True,  # it may hold a password
        ),
        Setting(
            "storage.recent.batches.bytes",
            int,
            64 << 20,
            "PostgreSQL engine: bytes of the newest flushed batches of all logs kept in memory,"
            " which consumers near the end of a log read without a query (older reads query the"
            " database in a worker thread).",
            0,
        ),
        Setting(
            "log.max.open.files",
            int,
            1000,
            "Most segment and index files kept open at once; the least recently used are closed"
            " and reopened when needed.",
            16,
        ),
        Setting(
            "log.flush.offset.checkpoint.interval.ms",
            int,
            60000,
            "How often the recovery-point and log-start-offset checkpoint files are written"
            " (also at shutdown); start-up compares the logs with them to report lost offsets.",
            1,
        ),
        Setting(
            "producer.id.expiration.ms",
            int,
            86400000,
            "How long the broker remembers an idle idempotent producer's last batches.",
            1,
        ),
        Setting(
            "producer.id.expiration.check.interval.ms",
            int,
            600000,
            "How often idle producers are looked for.",
            1,
        ),
        Setting(
            "metrics.max.groups",
            int,
            1000,
            "Groups that get their own per-group series in /metrics; the others are summed into"
            ' consumergroup="__other__".',
            0,
        ),
        Setting(
            "metrics.max.partitions",
            int,
            10000,
            "Partitions that get kafka_topic_partition_* series in /metrics (whole topics in"
            ' order); the others are summed into topic="__other__".',
            0,
        ),
        Setting(
            "metrics.max.connections",
            int,
            100,
            "Most HTTP connections the metrics port (/metrics, /healthz, the console) holds at"
            " once; a new one past it is answered 503 and closed. max.connections does not"
            " count them.",
            1,
        ),
        Setting(
            "metrics.request.timeout.ms",
            int,
            10000,
            "A metrics-port client that has not sent its whole request head this long after"
            " connecting is disconnected (an idle connection too: one request per connection).",
            1,
        ),
        Setting(
            "metrics.response.timeout.ms",
            int,
            30000,
            "A metrics-port client that has not taken its whole answer this long after it was"
            " ready is disconnected.",
            1,
        ),
        Setting(
            "transaction.state.log.num.partitions", int, 50, "Partitions of __transaction_state.", 1
        ),
        Setting(
            "transaction.state.log.segment.bytes",
            int,
            104857600,
            "Segment size of __transaction_state.",
            1024,
        ),
        Setting(
            "transaction.max.timeout.ms",
            int,
            900000,
            "Longest transaction timeout a producer may ask for (INVALID_TRANSACTION_TIMEOUT).",
            1,
        ),
        Setting(
            "transactional.id.expiration.ms",
            int,
            604800000,
            "A transactional id with no transaction for this long is removed.",
            1,
        ),
        Setting(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            int,
            10000,
            "How often transactions past their timeout are looked for (and aborted).",
            1,
        ),
        Setting(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            int,
            3600000,
            "How often expired transactional ids are looked for.",
            1,
        ),
        Setting("offsets.topic.num.partitions", int, 50, "Partitions of __consumer_offsets.", 1),
        Setting(
            "offsets.topic.segment.bytes", int, 104857600, "Segment size of __consumer_offsets.", 1024
        ),
        Setting(
            "group.initial.rebalance.delay.ms",
            int,
            3000,
            "Delay of the first rebalance of an empty group.",
            0,
        ),
        Setting("group.min.session.timeout.ms", int, 6000, "Smallest session timeout accepted.", 0),
        Setting(
            "group.max.session.timeout.ms", int, 1800000, "Largest session timeout accepted.", 0
        ),
        Setting("group.max.size", int, _INT_MAX, "Most members a classic group may have.", 1),
        Setting(
            "group.consumer.heartbeat.interval.ms",
            int,
            5000,
            "Heartbeat interval told to consumer-protocol (KIP-848) members.",
            1,
        ),
        Setting(
            "group.consumer.session.timeout.ms",
            int,
            45000,
            "A consumer-protocol member silent this long is fenced.",
            1,
        ),
        Setting(
            "group.consumer.min.heartbeat.interval.ms", int, 5000, "Lower bound of the above.", 1
        ),
        Setting(
            "group.consumer.max.heartbeat.interval.ms", int, 15000, "Upper bound of the above.", 1
        ),
        Setting("group.consumer.min.session.timeout.ms", int, 45000, "Lower bound of the above.", 1),
        Setting("group.consumer.max.session.timeout.ms", int, 60000, "Upper bound of the above.", 1),
        Setting("group.consumer.max.size", int, _INT_MAX, "Most members a consumer group may have.", 1),
        Setting(
            "group.consumer.assignors",
            str,
            "uniform,range",
            "Server assignors offered to consumer groups (uniform, range); the first is the default.",
        ),
        # KIP-1263 (Kafka 4.3): batched and offloaded target assignment (docs/groups.md).
        Setting(
            "group.consumer.assignment.interval.ms",
            int,
            1000,
            "A consumer group's target assignment is computed at most once per interval"
            " (0: at once).",
            0,
        ),
        Setting("group.consumer.min.assignment.interval.ms", int, 0, "Lower bound of the above.", 0),
        Setting(
            "group.consumer.max.assignment.interval.ms", int, 60000, "Upper bound of the above.", 0
        ),
        Setting(
            "group.consumer.assignor.offload.enable",
            bool,
            True,
            "Compute a large consumer group's target assignment in a worker thread, off the"
            " event loop.",
        ),
        Setting(
            "group.consumer.migration.policy",
            str,
            "bidirectional",
            "Online conversion between classic and consumer groups: bidirectional, upgrade,"
            " downgrade or disabled.",
        ),
        # Share groups (KIP-932): Kafka 4.2's names and defaults.
        Setting(
            "group.share.heartbeat.interval.ms",
            int,
            5000,
            "Heartbeat interval told to share-group members.",
            1,
        ),
        Setting(
            "group.share.session.timeout.ms",
            int,
            45000,
            "A share-group member silent this long is fenced.",
            1,
        ),
        Setting("group.share.min.heartbeat.interval.ms", int, 5000, "Lower bound of the above.", 1),
        Setting("group.share.max.heartbeat.interval.ms", int, 15000, "Upper bound of the above.", 1),
        Setting("group.share.min.session.timeout.ms", int, 45000, "Lower bound of the above.", 1),
        Setting("group.share.max.session.timeout.ms", int, 60000, "Upper bound of the above.", 1),
        Setting("group.share.max.size", int, 200, "Most members a share group may have.", 1),
        Setting(
            "group.share.record.lock.duration.ms",
            int,
            30000,
            "How long a share consumer holds a record it acquired before it is released.",
            1000,
        ),
        Setting(
            "group.share.min.record.lock.duration.ms", int, 15000, "Lower bound of the above.", 1000
        ),
        Setting(
            "group.share.max.record.lock.duration.ms", int, 60000, "Upper bound of the above.", 1000
        ),
        Setting(
            "group.share.partition.max.record.locks",
            int,
            2000,
            "Most records of one share partition acquired (in flight) at once.",
            100,
        ),
        Setting(
            "group.share.delivery.count.limit",
            int,
            5,
            "Deliveries of a record after which it is archived instead of made available again.",
            2,
        ),
        Setting(
            "group.share.max.share.sessions",
            int,
            2000,
            "Most share sessions (ShareFetch) the broker keeps.",
            1,
        ),
        Setting(
            "share.coordinator.state.topic.num.partitions",
            int,
            50,
            "Partitions of __share_group_state.",
            1,
        ),
        Setting(
            "share.coordinator.state.topic.segment.bytes",
            int,
            104857600,
            "Segment size of __share_group_state.",
            1024,
        ),
        Setting(
            "share.coordinator.snapshot.update.records.per.snapshot",
            int,
            500,
            "Share-state updates of one share partition written between two snapshots of it.",
            0,
        ),
        Setting(
            "share.coordinator.state.topic.prune.interval.ms",
            int,
            300000,
            "How often records of __share_group_state older than every snapshot still needed"
            " are deleted.",
            1,
        ),
        Setting("offsets.retention.minutes", int, 10080, "How long committed offsets are kept.", 1),
        Setting(
            "offsets.retention.check.interval.ms",
            int,
            600000,
            "How often expired offsets are looked for.",
            1,
        ),
        Setting("offset.metadata.max.bytes", int, 4096, "Longest offset commit metadata.", 0),
        Setting("log.cleaner.enable", bool, True, "Compact the __consumer_offsets partitions."),
        Setting(
            "log.cleaner.backoff.ms", int, 15000, "Pause between compaction passes.", 1
        ),
        Setting(
            "log.cleaner.delete.retention.ms",
            int,
            86400000,
            "How long tombstones survive compaction.",
            0,
        ),
    ]
}


def parse_value(setting: Setting, raw: Any) -> Any:
    t = setting.type
    try:
        if t is bool:
            if isinstance(raw, bool):
                value: Any = raw
            elif isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
                value = raw.strip().lower() == "true"
            else:
                raise ValueError
        elif t is int:
            if isinstance(raw, bool):
                raise ValueError
            value = int(raw)
        elif t is float:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        else:
            value = str(raw)
            if setting.choices is not None:
                items = [v.strip() for v in value.split(",") if v.strip()]
                if not items or any(v not in setting.choices for v in items):
                    raise ValueError
                if setting.single and len(items) != 1:
                    raise ValueError
                if setting.single:
                    value = items[0]
    except (TypeError, ValueError):
        raise ConfigError(
            f"setting {setting.name!r}: {raw!r} is not valid; allowed values: {setting.allowed()}"
        ) from None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if setting.minimum is not None and number and value < setting.minimum:
        raise ConfigError(
            f"setting {setting.name!r}: {value} is below the minimum {setting.minimum};"
            f" allowed values: {setting.allowed()}"
        )
    if setting.maximum is not None and number and value > setting.maximum:
        raise ConfigError(
            f"setting {setting.name!r}: {value} is above the maximum {setting.maximum};"
            f" allowed values: {setting.allowed()}"
        )
    return value


def unknown_setting(name: str, source: str) -> ConfigError:
    """The error for a name that is no setting: the closest known names, then all of them."""
    close = difflib.get_close_matches(name, list(SETTINGS), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
    return ConfigError(
        f"unknown setting {name!r} (from {source}){hint}"
        f" Known settings: {', '.join(sorted(SETTINGS))}"
    )
