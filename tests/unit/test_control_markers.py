"""Transaction markers encode as Kafka's control batches and decode back."""

from __future__ import annotations

from kcoord.protocol.control import decode_marker, encode_marker, is_marker_batch
from kcoord.protocol.records import decode_batch


def test_markers_round_trip() -> None:
    for commit in (True, False):
        data = encode_marker(7, 3, commit, coordinator_epoch=5, timestamp_ms=1_700_000_000_000)
        batch = decode_batch(data)
        h = batch.header
        assert is_marker_batch(h)
        assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (7, 3, -1, 1)
        (record,) = batch.records
        assert record.key == (b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00")
        marker = decode_marker(record.key, record.value)
        assert marker is not None and (marker.commit, marker.coordinator_epoch) == (commit, 5)


def test_unknown_control_records_are_not_markers() -> None:
    assert decode_marker(b"\x00\x00\x00\x05", None) is None  # a control type Kafka may add
    assert decode_marker(b"\x00\x01\x00\x01", None) is None  # a newer key version
    assert decode_marker(None, None) is None
