"""The API version table: which APIs and versions kcoord implements, and their header versions.

Only what is implemented and tested is advertised. Produce is advertised from v0 because
librdkafka decides on feature support (compression among them) from the advertised range; v0–v2
requests are answered with UNSUPPORTED_VERSION, as Apache Kafka 4 does.
"""

from __future__ import annotations

from enum import IntEnum
from functools import cache

from kio.index import UnknownEntity, load_request_schema


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    TXN_OFFSET_COMMIT = 28
    DELETE_TOPICS = 20
    DELETE_GROUPS = 42
    CREATE_PARTITIONS = 37
    OFFSET_DELETE = 47
    SASL_AUTHENTICATE = 36
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    DELETE_RECORDS = 21
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    WRITE_TXN_MARKERS = 27
    DESCRIBE_PRODUCERS = 61
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


# api key -> (min version, max version) advertised in ApiVersions.
SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 13),  # v13: a top-level error code, always none (as Kafka)
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # v0: the tokens follow as bare frames (broker/security/sasl/api.py)
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 4),  # v4: between brokers (KIP-890 verification); not v5
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 4),  # v5 is transactions version 2 (an epoch bump per transaction)
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_COMMIT: (0, 10),  # v10 names topics by id (broker/groups/topic_ids.py)
    ApiKey.OFFSET_FETCH: (0, 10),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),  # v0 was Kafka 4.0's early access, gone since
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),  # v0 is gone from Kafka 4's clients (and from kio)
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.SHARE_FETCH: (1, 2),  # v0 was early access (Kafka 4.0); 4.1 starts at v1
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    # The share coordinator's APIs, between nodes of a cluster (broker/share/state_api.py);
    # advertised as Kafka's brokers advertise their broker-listener APIs. v1 of Write and of
    # ReadSummary carry KIP-1226's delivery complete count.
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 1),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),  # v1: the lag (KIP-1226)
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}

# Versions we advertise but cannot decode with kio; the broker answers them by hand.
LEGACY_PRODUCE_MAX = 2


def is_supported(api_key: int, version: int) -> bool:
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]


@cache
def is_flexible(api_key: int, version: int) -> bool:
    """Whether this API version uses flexible (tagged-field) encoding and header v2/v1."""
    try:
        schema = load_request_schema(api_key, version)
    except (UnknownEntity, KeyError, ImportError, ValueError):
        return False
    except Exception:
        return False
    return bool(schema.__flexible__)
