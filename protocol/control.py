"""Transaction markers: the control batches that end a transaction in a partition's log.

When a transaction commits or aborts, the transaction coordinator has a marker written to every
partition the transaction wrote to (data partitions and ``__consumer_offsets`` partitions). A
marker is a v2 batch with the transactional and control flags set, the producer's id and epoch,
no sequence, and one record: key ``(version int16 = 0, type int16)`` with type 0 for ABORT and 1
for COMMIT, value ``(version int16 = 0, coordinator epoch int32)``. Readers skip control
batches; a ``read_committed`` consumer uses them to drop what an aborted transaction wrote.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .batch import BatchHeader
from .record_encoding import encode_batch
from .records import Record

ABORT = 0
COMMIT = 1

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class Marker:
    commit: bool
    coordinator_epoch: int


def encode_marker(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
) -> bytes:
    """The control batch of one COMMIT or ABORT marker."""
    record = Record(
        offset_delta=0,
        timestamp_delta=0,
        key=_KEY.pack(0, COMMIT if commit else ABORT),
        value=_VALUE.pack(0, coordinator_epoch),
    )
    return encode_batch(
        [record],
        base_offset=base_offset,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def decode_marker(key: bytes | None, value: bytes | None) -> Marker | None:
    """The marker a control record holds; None if it is no transaction marker (an unknown
    control type or version, which readers skip)."""
    if key is None or len(key) < _KEY.size:
        return None
    version, kind = _KEY.unpack_from(key)
    if version != 0 or kind not in (ABORT, COMMIT):
        return None
    epoch = 0
    if value is not None and len(value) >= _VALUE.size:
        epoch = _VALUE.unpack_from(value)[1]
    return Marker(kind == COMMIT, epoch)


def is_marker_batch(h: BatchHeader) -> bool:
    return h.is_control and h.is_transactional
