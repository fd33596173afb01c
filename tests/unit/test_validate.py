"""Produce validation (protocol.validate): every rule with its error code, valid batches from
our own encoder always pass, and any single corruption of a record's count, offset deltas or
lengths is refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kcoord.protocol.batch import HEADER_SIZE, compute_crc
from kcoord.protocol.compression import Compression, compress
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch, encode_batch, encode_record
from kcoord.protocol.record_scan import (
    LayoutError,
    batch_first_at_or_after,
    batch_max_timestamp,
    check_layout,
)
from kcoord.protocol.records import Record, RecordHeader
from kcoord.protocol.validate import Refused, check_batch, check_records, needs_worker

T0 = 1_700_000_000_000
LIMIT = 1 << 20


def _entries(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]:
    return [(f"k{i}".encode(), f"value {i}".encode() * 3, [("h", b"x")], T0 + i) for i in range(n)]


def _check(records: bytes, version: int = 9) -> None:
    header = check_batch(records, version)
    check_records(header, records, LIMIT)


def _refusal(records: bytes, version: int = 9) -> Refused:
    with pytest.raises(Refused) as info:
        _check(records, version)
    return info.value


def _fix_crc(batch: bytearray | bytes) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def _with_header(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    return _fix_crc(out)


def _reframe(batch: bytes, payload: bytes) -> bytes:
    """``batch`` with its records section replaced by ``payload`` (length and CRC fixed)."""
    out = bytearray(batch[:HEADER_SIZE]) + payload
    struct.pack_into(">i", out, 8, len(out) - 12)
    return _fix_crc(out)


# -- header rules ---------------------------------------------------------------------------------

GOOD = build_batch(_entries(3))


def test_a_good_batch_passes_every_codec() -> None:
    for codec in Compression:
        _check(build_batch(_entries(50), compression=codec))


def test_empty_records() -> None:
    assert _refusal(b"").error_code == ErrorCode.invalid_record


def test_crc_and_framing_are_corrupt_message() -> None:
    bad = bytearray(GOOD)
    bad[-2] ^= 1
    assert _refusal(bytes(bad)).error_code == ErrorCode.corrupt_message
    assert _refusal(GOOD[:-3]).error_code == ErrorCode.corrupt_message
    assert _refusal(GOOD[:40]).error_code == ErrorCode.corrupt_message
    # CRC first: a good batch followed by a corrupt one is CORRUPT_MESSAGE, not "two batches"
    assert _refusal(GOOD + bytes(bad)).error_code == ErrorCode.corrupt_message
    assert _refusal(_with_header(GOOD, ">b", 16, 3)).error_code == ErrorCode.corrupt_message
    short_length = _with_header(GOOD, ">i", 8, 10)
    assert _refusal(short_length).error_code == ErrorCode.corrupt_message


def test_old_magic_is_invalid_record() -> None:
    for magic in (0, 1):
        old = bytearray(GOOD)
        old[16] = magic
        assert _refusal(bytes(old)).error_code == ErrorCode.invalid_record


def test_exactly_one_batch() -> None:
    r = _refusal(GOOD + GOOD)
    assert r.error_code == ErrorCode.invalid_record
    assert "exactly one" in r.message


@pytest.mark.parametrize(
    ("field", "fmt", "at", "value"),
    [
        ("base offset", ">q", 0, 5),
        ("lastOffsetDelta 0 on 3 records", ">i", 23, 0),
        ("lastOffsetDelta 2^31-1", ">i", 23, 2**31 - 1),
        ("negative lastOffsetDelta", ">i", 23, -1),
        ("record count 2", ">i", 57, 2),
        ("record count 0", ">i", 57, 0),
        ("negative record count", ">i", 57, -3),
    ],
)
def test_offsets_and_count_are_invalid_record(field: str, fmt: str, at: int, value: int) -> None:
    assert _refusal(_with_header(GOOD, fmt, at, value)).error_code == ErrorCode.invalid_record


def test_control_batch_from_a_client() -> None:
    control = build_batch(_entries(1), is_control=True)
    assert _refusal(control).error_code == ErrorCode.invalid_record


def test_producer_id_with_negative_sequence() -> None:
    batch = build_batch(_entries(2), producer_id=7, producer_epoch=0, base_sequence=-1)
    assert _refusal(batch).error_code == ErrorCode.invalid_record
    _check(build_batch(_entries(2), producer_id=7, producer_epoch=0, base_sequence=0))
    _check(build_batch(_entries(2), producer_id=-1, producer_epoch=-1, base_sequence=-1))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    attributes = struct.unpack_from(">h", GOOD, 21)[0]
    batch = _with_header(GOOD, ">h", 21, (attributes & ~7) | codec)
    assert _refusal(batch).error_code == ErrorCode.unsupported_compression_type


def test_zstd_needs_produce_v7() -> None:
    batch = build_batch(_entries(3), compression=Compression.ZSTD)
    assert _refusal(batch, version=6).error_code == ErrorCode.unsupported_compression_type
    _check(batch, version=7)
    _check(build_batch(_entries(3), compression=Compression.LZ4), version=3)


# -- records ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_garbage_records_with_a_fixed_crc(codec: Compression) -> None:
    batch = build_batch(_entries(3), compression=codec)
    garbage = _reframe(batch, b"\x13\x37" * 40)
    expected = ErrorCode.invalid_record if codec == Compression.NONE else ErrorCode.corrupt_message
    assert _refusal(garbage).error_code == expected  # codecs cannot read it: CORRUPT_MESSAGE


def test_compressed_records_that_do_not_parse_are_invalid_record() -> None:
    raw = bytearray()
    for r in [Record(0, 0, b"k", b"v"), Record(1, 0, b"k", b"v")]:
        encode_record(raw, r)
    batch = build_batch(_entries(2), compression=Compression.GZIP)
    bad = _reframe(batch, compress(Compression.GZIP, bytes(raw) + b"\x00"))  # a byte left over
    assert _refusal(bad).error_code == ErrorCode.invalid_record


def test_records_expanding_past_the_limit_are_message_too_large() -> None:
    batch = build_batch(
        [(None, bytes(200_000), (), T0 + i) for i in range(10)], compression=Compression.ZSTD
    )
    header = check_batch(batch, 9)
    with pytest.raises(Refused) as info:
        check_records(header, batch, 1_000_000)
    assert info.value.error_code == ErrorCode.message_too_large
    check_records(header, batch, 3_000_000)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_offset_deltas_must_be_0_to_n_minus_1(codec: Compression) -> None:
    # Kafka would rewrite (compressed) or accept (uncompressed) these; we store verbatim.
    records = [Record(0, 0, b"a", b"1"), Record(2, 0, b"b", b"2"), Record(1, 0, b"c", b"3")]
    batch = encode_batch(records, base_timestamp=T0, compression=codec, last_offset_delta=2)
    r = _refusal(batch)
    assert r.error_code == ErrorCode.invalid_record
    assert r.record_errors == ((1, "offset delta 2 where 1 was expected"),)
    same = [Record(0, 0, b"a", b"1"), Record(0, 0, b"b", b"2"), Record(0, 0, b"c", b"3")]
    batch = encode_batch(same, base_timestamp=T0, compression=codec, last_offset_delta=2)
    assert _refusal(batch).record_errors[0][0] == 1


def test_a_key_length_running_past_its_record() -> None:
    raw = bytearray()
    for r in [Record(0, 0, b"ab", b"v"), Record(1, 0, b"cd", b"w")]:
        encode_record(raw, r)
    raw[4] = 2 * 5  # record 0's key length (byte 4: after length, attributes, two deltas): 5
    r = _refusal(_reframe(build_batch(_entries(2)), bytes(raw)))
    assert r.error_code == ErrorCode.invalid_record and r.record_errors[0][0] == 0


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_a_compacted_topic_refuses_records_without_a_key(codec: Compression) -> None:
    """Kafka's LogValidator: a compacted topic cannot accept a record without a key."""
    entries = _entries(3)
    entries[1] = (None, b"v", [], T0)
    batch = build_batch(entries, compression=codec)
    header = check_batch(batch, 9)
    check_records(header, batch, LIMIT)  # any other topic takes it
    with pytest.raises(Refused) as info:
        check_records(header, batch, LIMIT, keys_required=True)
    assert info.value.error_code == ErrorCode.invalid_record
    assert info.value.record_errors == ((1, "a record without a key in a compacted topic"),)
    good = build_batch(_entries(3), compression=codec)
    check_records(check_batch(good, 9), good, LIMIT, keys_required=True)


def test_header_keys_need_not_be_utf8() -> None:
    raw = bytearray()
    encode_record(raw, Record(0, 0, None, b"v", (RecordHeader("h", b"x"),)))
    raw = raw.replace(b"\x02h", b"\x02\xff")  # the header key's one byte: not UTF-8
    _check(_reframe(build_batch([(None, b"v", [("h", b"x")], T0)]), bytes(raw)))


def test_needs_worker() -> None:
    small = check_batch(GOOD, 9)
    assert not needs_worker(small, 16384)
    assert needs_worker(small, 10)
    assert needs_worker(check_batch(build_batch(_entries(1), compression=Compression.GZIP), 9), 1 << 20)


# -- properties ---------------------------------------------------------------------------------

_headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
)
_entry = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=3000)),
    _headers,
    st.integers(T0 - 10**6, T0 + 10**6),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(_entry, min_size=1, max_size=80),
    codec=st.sampled_from(list(Compression)),
    idempotent=st.booleans(),
)
def test_any_batch_of_our_encoder_passes(
    entries: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: Compression,
    idempotent: bool,
) -> None:
    ids = dict(producer_id=42, producer_epoch=3, base_sequence=1000) if idempotent else {}
    _check(build_batch(entries, compression=codec, **ids))  # type: ignore[arg-type]


def _record_starts(raw: bytes, count: int) -> list[int]:
    """Positions of each record's length varint in an uncompressed records section."""
    starts, pos = [], 0
    for _ in range(count):
        starts.append(pos)
        z, shift, p = 0, 0, pos
        while True:
            b = raw[p]
            z |= (b & 0x7F) << shift
            p += 1
            if b < 0x80:
                break
            shift += 7
        pos = p + ((z >> 1) ^ -(z & 1))
    return starts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(_entry, min_size=1, max_size=20),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4]),
    which=st.integers(0, 10**6),
    field=st.sampled_from(["length", "offset delta", "count"]),
    delta=st.sampled_from([-3, -2, -1, 1, 2, 5, 1000]),
)
def test_a_single_corruption_is_refused(
    entries: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: Compression,
    which: int,
    field: str,
    delta: int,
) -> None:
    good = build_batch(entries, compression=Compression.NONE)
    raw = bytearray(good[HEADER_SIZE:])
    n = len(entries)
    i = which % n
    start = _record_starts(bytes(raw), n)[i]
    header_fields: dict[int, int] = {}
    if field == "count":
        # records count and lastOffsetDelta moved together: only the records can tell
        assume(n + delta > 0)
        header_fields = {57: n + delta, 23: n + delta - 1}
    else:
        # Change one one-byte varint of record i: its length, or its offset delta (which
        # follows the attributes and a one-byte timestamp delta).
        assume(raw[start] < 0x80 and raw[start + 2] < 0x80)
        at = start if field == "length" else start + 3
        decoded = (raw[at] >> 1) ^ -(raw[at] & 1)
        new = decoded + delta
        z = (new << 1) ^ (new >> 63)
        assume(raw[at] < 0x80 and 0 <= z < 0x80)
        raw[at] = z
    payload = compress(codec, bytes(raw)) if codec else bytes(raw)
    out = bytearray(good[:HEADER_SIZE]) + payload
    struct.pack_into(">i", out, 8, len(out) - 12)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~7) | codec)
    for at, value in header_fields.items():
        struct.pack_into(">i", out, at, value)
    batch = _fix_crc(out)
    r = _refusal(batch)
    assert r.error_code == ErrorCode.invalid_record, (field, delta, r)


# -- the walkers ListOffsets uses ----------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_batch_lookups(codec: Compression) -> None:
    stamps = [T0 + 5, T0 + 1, T0 + 9, T0 + 9, T0 + 3]
    batch = bytearray(
        build_batch([(None, b"v", (), ts) for ts in stamps], compression=codec, base_offset=100)
    )
    assert batch_max_timestamp(bytes(batch)) == (102, T0 + 9)
    assert batch_first_at_or_after(bytes(batch), 100, T0 + 4) == (100, T0 + 5)
    assert batch_first_at_or_after(bytes(batch), 101, T0 + 4) == (102, T0 + 9)
    assert batch_first_at_or_after(bytes(batch), 100, T0 + 10) is None


def test_log_append_time_lookups_use_the_batch_time() -> None:
    batch = build_batch([(None, b"v", (), T0 + i) for i in range(3)], log_append_time=True,
                        max_timestamp=T0 + 50)
    assert batch_max_timestamp(batch) == (0, T0 + 50)
    assert batch_first_at_or_after(batch, 1, T0 + 20) == (1, T0 + 50)


def test_layout_errors_name_the_record() -> None:
    raw = bytearray()
    for r in [Record(0, 0, b"a", b"1"), Record(1, 0, b"b", b"2")]:
        encode_record(raw, r)
    with pytest.raises(LayoutError) as info:
        check_layout(bytes(raw) + b"\x00" * 7, 0, len(raw) + 7, 2)
    assert info.value.index == -1 and "left over" in str(info.value)
    with pytest.raises(LayoutError) as info:
        check_layout(bytes(raw), 0, len(raw) - 1, 2)
    assert info.value.index == 1
