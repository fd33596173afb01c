"""protocol/append_rules.py: a topic's timestamp window, LogAppendTime stamping and the
broker's compression.type, on batches from our own encoder."""

from __future__ import annotations

import pytest

from kcoord.protocol.append_rules import PLAIN, AppendRules, accept
from kcoord.protocol.batch import crc_ok, parse_header
from kcoord.protocol.compression import Compression
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch
from kcoord.protocol.records import decode_batch
from kcoord.protocol.validate import Refused, check_batch

NOW = 1_700_000_000_000
HOUR = 3_600_000
LIMIT = 1 << 20


def _batch(timestamps: list[int], compression: int = Compression.NONE) -> bytes:
    entries = [(f"k{i}".encode(), b"v" * 50, [("h", b"x")], ts) for i, ts in enumerate(timestamps)]
    return build_batch(entries, compression=compression)


def _accept(batch: bytes, rules: AppendRules) -> bytes:
    return accept(check_batch(batch, 9), batch, LIMIT, rules, NOW)


def _refusal(batch: bytes, rules: AppendRules) -> Refused:
    with pytest.raises(Refused) as info:
        _accept(batch, rules)
    return info.value


def _contents(batch: bytes) -> list[tuple[bytes | None, bytes | None, int]]:
    b = decode_batch(batch)
    return [(r.key, r.value, ts) for _, ts, r in b.iter_records()]


def test_plain_rules_change_nothing() -> None:
    batch = _batch([NOW - 10 * HOUR, NOW + 10 * HOUR])
    assert _accept(batch, PLAIN) is batch


def test_create_time_window_refuses_records_outside_it() -> None:
    kafka_default = AppendRules(after_max_ms=HOUR)
    assert _accept(_batch([NOW - 1000 * HOUR, NOW + HOUR]), kafka_default)  # at the bound: fine
    r = _refusal(_batch([NOW, NOW + HOUR + 1, NOW]), kafka_default)
    assert r.error_code == ErrorCode.invalid_timestamp
    assert r.record_errors[0][0] == 1
    assert f"Timestamp {NOW + HOUR + 1} of message with offset 1 is out of range" in r.record_errors[0][1]
    assert f"within [{NOW - (2**63 - 1)}, {NOW + HOUR}]" in r.record_errors[0][1]
    before = AppendRules(before_max_ms=HOUR)
    r = _refusal(_batch([NOW, NOW - HOUR - 5], Compression.LZ4), before)  # walked decompressed
    assert (r.error_code, r.record_errors[0][0]) == (ErrorCode.invalid_timestamp, 1)
    assert _accept(_batch([-1, -1]), AppendRules(before_max_ms=0, after_max_ms=0))  # no timestamps


def test_log_append_time_stamps_the_batch_in_place() -> None:
    batch = _batch([NOW - 5 * HOUR, NOW - 4 * HOUR], Compression.GZIP)
    out = _accept(batch, AppendRules(log_append_time=True, after_max_ms=0))  # no window then
    h = parse_header(out)
    assert h.log_append_time and h.max_timestamp == NOW and h.compression == Compression.GZIP
    assert crc_ok(out, 0, h) and len(out) == len(batch)
    assert [ts for _, _, ts in _contents(out)] == [NOW, NOW]
    assert [k for k, _, _ in _contents(out)] == [b"k0", b"k1"]
    claimed = _refusal(out, AppendRules(log_append_time=True))  # a client may not claim it
    assert claimed.error_code == ErrorCode.invalid_timestamp


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (Compression.NONE, Compression.GZIP),
        (Compression.LZ4, Compression.ZSTD),
        (Compression.SNAPPY, Compression.NONE),
        (Compression.ZSTD, Compression.LZ4),
        (Compression.GZIP, Compression.SNAPPY),
    ],
)
def test_compression_type_reencodes_the_records(source: int, target: int) -> None:
    batch = _batch([NOW, NOW + 1, NOW + 2], source)
    out = _accept(batch, AppendRules(codec=target, level=None))
    h = parse_header(out)
    assert h.compression == target and crc_ok(out, 0, h) and h.size == len(out)
    assert h.records_count == 3 and h.max_timestamp == parse_header(batch).max_timestamp
    assert _contents(out) == _contents(batch)
    assert _accept(out, AppendRules(codec=target)) is out  # already in the topic's codec


def test_a_reencoded_batch_over_max_message_bytes_is_too_large() -> None:
    batch = _batch([NOW] * 50, Compression.ZSTD)  # repetitive: compresses well
    r = _refusal(batch, AppendRules(codec=Compression.NONE, max_bytes=len(batch) + 10))
    assert r.error_code == ErrorCode.message_too_large
    stamped = _accept(batch, AppendRules(codec=Compression.GZIP, log_append_time=True))
    h = parse_header(stamped)
    assert (h.compression, h.log_append_time, h.max_timestamp) == (Compression.GZIP, True, NOW)
