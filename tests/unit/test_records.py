"""Record batch v2 codec: round-trips, client interoperability and corrupt-input handling."""

from __future__ import annotations

import contextlib
import struct
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.protocol.batch import (
    CRC_START,
    HEADER_SIZE,
    CorruptBatch,
    compute_crc,
    iter_headers,
    parse_header,
    set_base_offset,
)
from kcoord.protocol.compression import (
    XERIAL_MAGIC,
    Compression,
    DecompressionError,
    UnsupportedCompression,
    compress,
    decompress,
    snappy_decompress,
    xerial_snappy_compress,
)
from kcoord.protocol.record_encoding import build_batch, encode_batch
from kcoord.protocol.records import (
    Record,
    RecordBatch,
    RecordHeader,
    decode_batch,
    decode_batches,
    read_varint,
    varint_size,
    write_varint,
)

ALL_CODECS = list(Compression)

SAMPLE = [
    Record(0, 0, b"key-0", b"value-0", (RecordHeader("trace", b"abc"),)),
    Record(1, 5, None, b"no key"),
    Record(2, 7, b"tombstone", None),
    Record(3, 9, b"", b""),
    Record(4, -3, None, None, (RecordHeader("", None), RecordHeader("ünï", b"\x00\xff"))),
    Record(
        5, 300, b"k" * 200, b"v" * 5000, tuple(RecordHeader(f"h{i}", b"x" * i) for i in range(20))
    ),
]


def _reframe(batch: bytes, payload: bytes, records_count: int | None = None) -> bytes:
    """Swap a batch's records section for ``payload`` and fix length (and count) and CRC,
    so that only the records section is wrong."""
    out = bytearray(batch[:HEADER_SIZE]) + payload
    struct.pack_into(">i", out, 8, len(out) - 12)
    if records_count is not None:
        struct.pack_into(">i", out, 57, records_count)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def _compressible_entries(n: int = 20, size: int = 200) -> list[tuple]:
    return [
        (
            f"key-{i}".encode(),
            (f"payload {i} " * size).encode()[: size + i],
            [("h", f"hv{i}".encode()), ("null", None)],
            1_700_000_000_000 + 3 * i,
        )
        for i in range(n)
    ]


# --------------------------------------------------------------------------- round-trips


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_every_codec(codec: Compression) -> None:
    raw = encode_batch(
        SAMPLE,
        base_offset=1234,
        base_timestamp=1_600_000_000_000,
        compression=codec,
        producer_id=77,
        producer_epoch=3,
        base_sequence=41,
        partition_leader_epoch=9,
    )
    batch = decode_batch(raw)
    assert batch.records == SAMPLE
    h = batch.header
    assert h.compression == codec and batch.compression is codec
    assert h.base_offset == batch.base_offset == 1234
    assert h.last_offset_delta == 5 and h.last_offset == 1239
    assert h.records_count == len(batch) == len(SAMPLE)
    assert h.base_timestamp == 1_600_000_000_000
    assert h.max_timestamp == 1_600_000_000_300
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 41)
    assert h.partition_leader_epoch == 9
    assert h.size == len(raw)
    assert not (h.is_control or h.is_transactional or h.log_append_time)
    if codec is not Compression.NONE:
        assert raw[HEADER_SIZE:] != encode_batch(SAMPLE, base_timestamp=0)[HEADER_SIZE:]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_empty_batch(codec: Compression) -> None:
    raw = encode_batch([], base_offset=10, base_timestamp=-1, compression=codec)
    batch = decode_batch(raw)
    assert batch.records == []
    assert batch.header.records_count == 0
    assert batch.header.last_offset_delta == 0
    assert batch.header.max_timestamp == -1
    assert list(batch.iter_records()) == []


def test_empty_batch_keeps_explicit_offset_span() -> None:
    # A compacted-away batch keeps its offset range so the log has no holes.
    raw = encode_batch([], base_offset=100, base_timestamp=5, last_offset_delta=9)
    assert decode_batch(raw).header.next_offset == 110


def test_iter_records_absolute_offsets_and_timestamps() -> None:
    recs = [Record(0, 0, b"a", b"1"), Record(2, -10, b"b", b"2"), Record(7, 40, b"c", b"3")]
    batch = decode_batch(encode_batch(recs, base_offset=50, base_timestamp=1000))
    assert [(o, t, r.key) for o, t, r in batch.iter_records()] == [
        (50, 1000, b"a"),
        (52, 990, b"b"),
        (57, 1040, b"c"),
    ]
    assert batch.offset_of(recs[2]) == 57 and batch.timestamp_of(recs[1]) == 990
    assert batch.header.max_timestamp == 1040


def test_log_append_time_reports_max_timestamp() -> None:
    recs = [Record(0, 0, b"a", b"1"), Record(1, 3, b"b", b"2")]
    raw = encode_batch(recs, base_timestamp=1000, max_timestamp=5555, log_append_time=True)
    batch = decode_batch(raw)
    assert batch.header.log_append_time
    assert [t for _, t, _ in batch.iter_records()] == [5555, 5555]


def test_flags() -> None:
    raw = encode_batch(
        [Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        base_timestamp=0,
        producer_id=5,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
        compression=Compression.ZSTD,
    )
    h = decode_batch(raw).header
    assert h.is_transactional and h.is_control and not h.log_append_time
    assert h.compression == Compression.ZSTD


def test_default_base_timestamp_is_now() -> None:
    import time

    before = time.time_ns() // 1_000_000
    h = decode_batch(encode_batch([Record(0, 0, None, b"v")])).header
    assert before <= h.base_timestamp <= time.time_ns() // 1_000_000


def test_build_batch_computes_deltas() -> None:
    raw = build_batch(
        [
            (b"k1", b"v1", [("a", b"1")], 2000),
            (None, b"v2", [RecordHeader("b", None)], 1500),
            (b"k3", None, (), 2600),
        ],
        base_offset=7,
        compression=Compression.GZIP,
    )
    batch = decode_batch(raw)
    h = batch.header
    assert (h.base_timestamp, h.max_timestamp, h.last_offset_delta) == (2000, 2600, 2)
    assert [(o, t, r.key, r.value, r.headers) for o, t, r in batch.iter_records()] == [
        (7, 2000, b"k1", b"v1", (RecordHeader("a", b"1"),)),
        (8, 1500, None, b"v2", (RecordHeader("b", None),)),
        (9, 2600, b"k3", None, ()),
    ]
    assert decode_batch(build_batch([])).records == []


def test_decode_batches_stops_at_partial_trailing_batch() -> None:
    b1 = encode_batch(SAMPLE[:2], base_offset=0, base_timestamp=0)
    b2 = encode_batch(SAMPLE[2:], base_offset=2, base_timestamp=0, compression=Compression.LZ4)
    b3 = encode_batch(SAMPLE, base_offset=6, base_timestamp=0)
    whole = b1 + b2 + b3
    assert [b.base_offset for b in decode_batches(whole)] == [0, 2, 6]
    for cut in (len(b1) + len(b2) + 1, len(whole) - 1, len(b1) + len(b2) + 11):
        got = decode_batches(whole[:cut])
        assert [b.base_offset for b in got] == [0, 2]
    assert decode_batches(b"") == []
    assert decode_batches(b1[:5]) == []
    # decode_batch at an offset inside a larger buffer, from a memoryview too
    assert decode_batch(memoryview(whole), len(b1)).records == SAMPLE[2:]
    assert decode_batch(bytearray(whole), len(b1) + len(b2)).records == SAMPLE


def test_patched_base_offset_still_decodes() -> None:
    raw = bytearray(encode_batch(SAMPLE, base_timestamp=0, compression=Compression.SNAPPY))
    set_base_offset(raw, 0, 99_000)
    batch = decode_batch(raw)
    assert batch.base_offset == 99_000
    assert [o for o, _, _ in batch.iter_records()] == list(range(99_000, 99_006))
    assert iter_headers(raw)[0][1] == batch.header


def test_encode_rejects_out_of_range_fields() -> None:
    with pytest.raises(ValueError):
        encode_batch([Record(2**31, 0, None, None)], base_timestamp=0)
    with pytest.raises(ValueError):
        encode_batch([], base_offset=2**63, base_timestamp=0)
    with pytest.raises(ValueError):
        encode_batch([], base_timestamp=0, producer_epoch=40000)


# --------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (-(2**63), b"\xff" * 9 + b"\x01"),
    ],
)
def test_varint_encoding(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    assert bytes(out) == encoded
    assert varint_size(value) == len(encoded)
    assert read_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(value: int) -> None:
    out = bytearray(b"\x05")
    write_varint(out, value)
    assert read_varint(bytes(out), 1) == (value, len(out))


def test_varint_errors() -> None:
    with pytest.raises(CorruptBatch):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptBatch):
        read_varint(b"\xff" * 11, 0)
    with pytest.raises(CorruptBatch):
        read_varint(b"", 0)


# --------------------------------------------------------------------------- compression


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 300])
def test_compression_round_trip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, bytearray(data)))) == data


def test_snappy_writes_raw_and_reads_xerial() -> None:
    data = b"0123456789abcdef" * 10_000  # 160 KB: several 32 KB xerial chunks
    raw = compress(Compression.SNAPPY, data)
    assert not raw.startswith(XERIAL_MAGIC)
    framed = xerial_snappy_compress(data)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(Compression.SNAPPY, framed) == data
    assert snappy_decompress(xerial_snappy_compress(b"")) == b""
    assert snappy_decompress(xerial_snappy_compress(data, chunk_size=1000)) == data


@pytest.mark.parametrize("cut", [17, 19, 25, -1])
def test_truncated_xerial_stream(cut: int) -> None:
    framed = xerial_snappy_compress(b"hello world " * 100)
    with pytest.raises(DecompressionError):
        snappy_decompress(framed[:cut])


def test_xerial_negative_chunk_length() -> None:
    framed = bytearray(xerial_snappy_compress(b"abc"))
    struct.pack_into(">i", framed, 16, -5)
    with pytest.raises(DecompressionError):
        snappy_decompress(framed)


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c is not Compression.NONE])
def test_garbage_fails_to_decompress(codec: Compression) -> None:
    with pytest.raises(DecompressionError):
        decompress(codec, b"\xff\xfe definitely not compressed \x00\x01" * 3)


def test_unknown_codec() -> None:
    with pytest.raises(UnsupportedCompression) as exc:
        decompress(6, b"")
    assert exc.value.codec == 6
    assert isinstance(exc.value, CorruptBatch)


# --------------------------------------------------------------------------- corrupt input


def _valid(codec: Compression = Compression.NONE) -> bytes:
    return encode_batch(SAMPLE, base_offset=3, base_timestamp=10, compression=codec)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_crc_mismatch(codec: Compression) -> None:
    raw = bytearray(_valid(codec))
    raw[-1] ^= 0x40
    with pytest.raises(CorruptBatch, match="CRC"):
        decode_batch(raw)
    with pytest.raises(CorruptBatch, match="CRC"):
        decode_batches(raw)
    raw = bytearray(_valid(codec))
    raw[CRC_START] ^= 0x01  # attributes are covered by the CRC too
    with pytest.raises(CorruptBatch):
        decode_batch(raw)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_every_truncation_raises(codec: Compression) -> None:
    raw = _valid(codec)
    for cut in range(len(raw)):
        with pytest.raises(CorruptBatch):
            decode_batch(raw[:cut])


def test_bad_magic() -> None:
    raw = bytearray(_valid())
    raw[16] = 1
    with pytest.raises(CorruptBatch, match="magic"):
        decode_batch(raw)


def test_unsupported_codec_in_attributes() -> None:
    raw = bytearray(_valid())
    struct.pack_into(">h", raw, 21, 5)
    struct.pack_into(">I", raw, 17, compute_crc(raw, 0, len(raw)))
    with pytest.raises(UnsupportedCompression):
        decode_batch(raw)


def test_record_count_mismatch() -> None:
    raw = _valid()
    payload = raw[HEADER_SIZE:]
    with pytest.raises(CorruptBatch):
        decode_batch(_reframe(raw, payload, records_count=len(SAMPLE) + 1))
    with pytest.raises(CorruptBatch, match="left over"):
        decode_batch(_reframe(raw, payload, records_count=len(SAMPLE) - 1))
    with pytest.raises(CorruptBatch):
        decode_batch(_reframe(raw, payload, records_count=2**31 - 1))


def _single_record_batch(body: bytes, codec: Compression = Compression.NONE) -> bytes:
    rec = bytearray()
    write_varint(rec, len(body))
    rec += body
    template = encode_batch([Record(0, 0, None, None)], base_timestamp=0, compression=codec)
    return _reframe(template, compress(codec, rec), records_count=1)


def test_bad_varint_in_record() -> None:
    body = b"\x00" + b"\xff" * 11 + b"\x00\x01\x01\x00"
    with pytest.raises(CorruptBatch, match="varint"):
        decode_batch(_single_record_batch(body))


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\x00\x00\x03\x01\x00",  # key length -2
        b"\x00\x00\x00\x01\x05\x00",  # value length -3
        b"\x00\x00\x00\x10ab\x01\x00",  # key longer than the record
        b"\x00\x00\x00\x01\x01\x02\x01\x01",  # header key length -1
        b"\x00\x00\x00\x01\x01\x02\x04\xff\xfe\x01",  # header key not UTF-8
        b"\x00\x00\x00\x01\x01\x02\x00\x03",  # header value length -2
        b"\x00\x00\x00\x01\x01\x7f",  # header count -64
        b"\x00\x00\x00\x01\x01\x00\x00",  # record length larger than contents
    ],
)
def test_malformed_record_fields(body: bytes) -> None:
    with pytest.raises(CorruptBatch):
        decode_batch(_single_record_batch(body))


def test_hand_built_record_decodes() -> None:
    # attributes 0, ts delta 0, offset delta 0, key null, value "hi", one header "k" -> null
    body = b"\x00\x00\x00\x01\x04hi\x02\x02k\x01"
    rec = decode_batch(_single_record_batch(body, Compression.GZIP)).records[0]
    assert rec == Record(0, 0, None, b"hi", (RecordHeader("k", None),))


def test_decompression_failure_is_corrupt_batch() -> None:
    template = _valid(Compression.ZSTD)
    with pytest.raises(CorruptBatch, match="zstd"):
        decode_batch(_reframe(template, b"\x28\xb5\x2f\xfd garbage"))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(ALL_CODECS),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_mutated_batches_only_raise_corrupt_batch(
    codec: Compression, flips: list[tuple[int, int]]
) -> None:
    raw = bytearray(_valid(codec))
    for where, mask in flips:
        raw[where % len(raw)] ^= mask
    for verify in (True, False):
        with contextlib.suppress(CorruptBatch):
            decode_batch(raw, verify_crc=verify)


# --------------------------------------------------------------------------- property test

_headers = st.lists(
    st.builds(RecordHeader, st.text(max_size=8), st.none() | st.binary(max_size=16)),
    max_size=4,
).map(tuple)


@st.composite
def _records(draw: st.DrawFn) -> list[Record]:
    n = draw(st.integers(0, 12))
    gaps = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    out: list[Record] = []
    offset = draw(st.integers(0, 5))
    for gap in gaps:
        out.append(
            Record(
                offset,
                draw(st.integers(-(2**40), 2**40)),
                draw(st.none() | st.binary(max_size=40)),
                draw(st.none() | st.binary(max_size=300)),
                draw(_headers),
            )
        )
        offset += gap
    return out


@settings(max_examples=200, deadline=None)
@given(
    records=_records(),
    codec=st.sampled_from(ALL_CODECS),
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.integers(0, 2**50),
    producer=st.tuples(
        st.integers(-1, 2**40), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)
    ),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_property_round_trip(
    records: list[Record],
    codec: Compression,
    base_offset: int,
    base_timestamp: int,
    producer: tuple[int, int, int],
    flags: tuple[bool, bool, bool],
) -> None:
    raw = encode_batch(
        records,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        compression=codec,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        is_transactional=flags[0],
        is_control=flags[1],
        log_append_time=flags[2],
    )
    batch = decode_batch(raw)
    assert batch.records == records
    h = batch.header
    assert (h.base_offset, h.base_timestamp, h.compression) == (base_offset, base_timestamp, codec)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer
    assert (h.is_transactional, h.is_control, h.log_append_time) == flags
    assert parse_header(raw) == h
    assert decode_batches(raw + raw[:-1]) == [batch]


# --------------------------------------------------------------------------- interop: aiokafka


def _aiokafka_build(codec: int, entries: list[tuple]) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 10 * 1024 * 1024)
    for i, (key, value, headers, ts) in enumerate(entries):
        builder.append(i, ts, key, value, list(headers))
    return bytes(builder.build())


def _check_decoded(batch: RecordBatch, entries: list[tuple], base_offset: int = 0) -> None:
    got = [
        (o, t, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for o, t, r in batch.iter_records()
    ]
    want = [(base_offset + i, ts, k, v, list(hs)) for i, (k, v, hs, ts) in enumerate(entries)]
    assert got == want


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_aiokafka_to_us(codec: Compression) -> None:
    entries = _compressible_entries() + [(None, None, [], 1_700_000_000_100)]
    raw = _aiokafka_build(codec, entries)
    batch = decode_batch(raw)
    assert batch.header.compression == codec  # aiokafka falls back to NONE if it does not pay
    _check_decoded(batch, entries)
    if codec is Compression.SNAPPY:
        assert raw[HEADER_SIZE:].startswith(XERIAL_MAGIC)


def test_aiokafka_multi_chunk_xerial_snappy() -> None:
    entries = _compressible_entries(n=40, size=3000)  # > 32 KB of records: several chunks
    raw = _aiokafka_build(Compression.SNAPPY, entries)
    assert raw[HEADER_SIZE:].startswith(XERIAL_MAGIC)
    assert raw.count(b"\x82SNAPPY") == 1 and len(raw) > HEADER_SIZE
    _check_decoded(decode_batch(raw), entries)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_us_to_aiokafka(codec: Compression) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch

    entries = _compressible_entries() + [(None, None, [], 1_700_000_000_100)]
    raw = build_batch(
        entries,
        base_offset=500,
        compression=codec,
        producer_id=9,
        producer_epoch=1,
        base_sequence=0,
    )
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (theirs.base_offset, theirs.next_offset) == (500, 500 + len(entries))
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 1, 0)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    want = [(500 + i, ts, k, v, list(hs)) for i, (k, v, hs, ts) in enumerate(entries)]
    assert got == want


# --------------------------------------------------------------------------- interop: kafka-python


@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> set[Compression]:
    """Codecs kafka-python can use here. It has no snappy module installed, so give it a
    python-snappy lookalike over cramjam's raw block codec: kafka-python's own xerial
    framing code then runs on top of it."""
    import cramjam
    import kafka.codec

    available = {Compression.NONE, Compression.GZIP}
    if not kafka.codec.has_snappy():
        shim = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
        )
        monkeypatch.setattr(kafka.codec, "snappy", shim)
    available.add(Compression.SNAPPY)
    if kafka.codec.has_lz4():
        available.add(Compression.LZ4)
    if kafka.codec.has_zstd():
        available.add(Compression.ZSTD)
    return available


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_to_us(codec: Compression, kafka_python_codecs: set[Compression]) -> None:
    if codec not in kafka_python_codecs:
        pytest.skip(f"kafka-python has no {codec.name} library here (aiokafka covers it)")
    from kafka.record.default_records import DefaultRecordBatchBuilder

    entries = _compressible_entries(n=30, size=2000)
    builder = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, 10 * 1024 * 1024)
    for i, (key, value, headers, ts) in enumerate(entries):
        builder.append(i, ts, key, value, list(headers))
    raw = bytes(builder.build())
    batch = decode_batch(raw)
    assert batch.header.compression == codec
    if codec is Compression.SNAPPY:
        assert raw[HEADER_SIZE:].startswith(XERIAL_MAGIC)
    _check_decoded(batch, entries)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_us_to_kafka_python(codec: Compression, kafka_python_codecs: set[Compression]) -> None:
    if codec not in kafka_python_codecs:
        pytest.skip(f"kafka-python has no {codec.name} library here (aiokafka covers it)")
    from kafka.record.default_records import DefaultRecordBatch

    entries = _compressible_entries() + [(None, None, [], 1_700_000_000_100)]
    raw = build_batch(entries, base_offset=42, compression=codec)
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    want = [(42 + i, ts, k, v, list(hs)) for i, (k, v, hs, ts) in enumerate(entries)]
    assert got == want


def test_encode_kv_batch_matches_build_batch() -> None:
    from kcoord.protocol.record_encoding import build_batch, encode_kv_batch
    from kcoord.protocol.records import decode_batch

    pairs = [(b"k%d" % i, b"v" * i if i % 3 else None) for i in range(300)]
    pairs.append((b"big", b"x" * 20000))
    fast = encode_kv_batch(pairs, 1_700_000_000_123)
    assert fast == build_batch([(k, v, (), 1_700_000_000_123) for k, v in pairs])
    assert [(r.key, r.value) for r in decode_batch(fast).records] == pairs


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_decode_key_values_matches_full_decode(codec: int) -> None:
    from kcoord.protocol.batch import HEADER_SIZE, parse_header
    from kcoord.protocol.key_values import decode_key_values
    from kcoord.protocol.record_encoding import build_batch
    from kcoord.protocol.records import decode_batch

    entries = [
        (None if i % 7 == 0 else b"k%d" % i, None if i % 5 == 0 else b"v" * (i * 3), (("h", b"x"),) if i % 2 else (), 1_000 + i)
        for i in range(200)
    ]
    raw = build_batch(entries, compression=codec)
    full = [(r.key, r.value) for r in decode_batch(raw).records]
    assert decode_key_values(parse_header(raw), memoryview(raw)[HEADER_SIZE:]) == full
    with pytest.raises(CorruptBatch):
        decode_key_values(parse_header(raw), memoryview(raw)[HEADER_SIZE:-1])
