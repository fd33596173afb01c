"""Java ``String.hashCode`` and the consumer-group -> ``__consumer_offsets`` partition map.

Kafka places a group's state in partition ``Utils.abs(groupId.hashCode()) % n`` of
``__consumer_offsets`` (``n`` = offsets.topic.num.partitions, 50 by default). Getting this
bit-exact matters: clients locate their coordinator through it, and a replayed log must put
each group where a Java broker would.

Java hashes the UTF-16 code units of the string (so a character outside the Basic
Multilingual Plane contributes two surrogate units) with 32-bit wrap-around arithmetic.
Kafka's ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0 instead of leaving it negative.
"""

from __future__ import annotations

import struct

_INT32_MIN = -(2**31)
DEFAULT_OFFSETS_PARTITIONS = 50


def java_string_hashcode(s: str) -> int:
    """``s.hashCode()`` as Java computes it, as a signed 32-bit int.

    Lone surrogates in ``s`` (possible in both Python and Java strings) hash as the single
    code unit they are.
    """
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for unit in struct.unpack(f">{len(units) // 2}H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: absolute value, except that Integer.MIN_VALUE becomes 0."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition that owns ``group_id``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions
