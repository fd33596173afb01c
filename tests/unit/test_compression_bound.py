"""Bounded decompression (protocol.compression.decompress with a limit): honest data of every
codec round-trips up to the limit, one byte more is refused, and compression bombs of each codec
are refused without ever allocating their output (checked in a child process whose address space
is far smaller than the bomb)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord.protocol.compression import (
    DECOMPRESSION_FACTOR,
    DEFAULT_DECOMPRESSION_LIMIT,
    KAFKA_DEFAULT_MESSAGE_MAX_BYTES,
    XERIAL_MAGIC,
    Compression,
    DecompressionError,
    DecompressionLimitExceeded,
    compress,
    decompress,
    decompression_limit,
    xerial_snappy_compress,
)

ROOT = Path(__file__).resolve().parents[2]
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def test_limit_is_derived_from_message_max_bytes() -> None:
    assert DEFAULT_DECOMPRESSION_LIMIT == 16 * 1048588
    assert decompression_limit(KAFKA_DEFAULT_MESSAGE_MAX_BYTES) == DEFAULT_DECOMPRESSION_LIMIT
    assert decompression_limit(10 * 1024 * 1024) == DECOMPRESSION_FACTOR * 10 * 1024 * 1024
    # A smaller message.max.bytes does not make readers refuse what Kafka's default accepts.
    assert decompression_limit(1000) == DEFAULT_DECOMPRESSION_LIMIT


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=40, deadline=None)
@given(data=st.binary(min_size=1, max_size=5000))
def test_round_trip_at_the_limit_and_refusal_one_byte_below(codec: Compression, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed, len(data)) == data
    assert decompress(codec, packed) == data
    with pytest.raises(DecompressionLimitExceeded):
        decompress(codec, packed, len(data) - 1)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_large_honest_batch_round_trips(codec: Compression) -> None:
    data = b"".join(b"record %d with a value that compresses well " % i for i in range(60_000))
    assert decompress(codec, compress(codec, data)) == data  # ~2.8 MB, well within the limit


def test_uncompressed_data_is_not_bounded() -> None:
    assert decompress(Compression.NONE, b"x" * 100, 10) == b"x" * 100


def test_gzip_several_members_and_truncation() -> None:
    one, two = compress(Compression.GZIP, b"a" * 1000), compress(Compression.GZIP, b"b" * 500)
    assert decompress(Compression.GZIP, one + two) == b"a" * 1000 + b"b" * 500
    with pytest.raises(DecompressionLimitExceeded):
        decompress(Compression.GZIP, one + two, 1499)
    with pytest.raises(DecompressionError):
        decompress(Compression.GZIP, one[:-5])
    with pytest.raises(DecompressionError):
        decompress(Compression.GZIP, one + b"garbage!")


def test_xerial_chunks_count_against_the_limit_before_decoding() -> None:
    data = bytes(range(256)) * 400
    framed = xerial_snappy_compress(data, chunk_size=4096)
    assert decompress(Compression.SNAPPY, framed, len(data)) == data
    with pytest.raises(DecompressionLimitExceeded):
        decompress(Compression.SNAPPY, framed, len(data) - 1)


def test_snappy_block_declaring_a_huge_length_is_refused_before_allocation() -> None:
    # A raw snappy block starts with its uncompressed length (varint): claim 3 GiB.
    block = bytes([0x80, 0x80, 0x80, 0x80, 0x0C]) + b"\x00" * 16
    with pytest.raises(DecompressionLimitExceeded):
        decompress(Compression.SNAPPY, block)
    chunk = bytes([0x80, 0x80, 0x80, 0x80, 0x0C]) + b"\x00" * 16
    framed = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(chunk)) + chunk
    with pytest.raises(DecompressionLimitExceeded):
        decompress(Compression.SNAPPY, framed)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_garbage_is_a_decompression_error_not_a_limit(codec: Compression) -> None:
    with pytest.raises(DecompressionError) as info:
        decompress(codec, b"\x00\x01not compressed data at all\xff" * 3)
    assert not isinstance(info.value, DecompressionLimitExceeded)


def test_decoders_report_a_full_output_buffer_as_rust_does() -> None:
    """The lz4/zstd limit relies on cramjam failing with Rust's WriteZero message when the
    output buffer is full; pin it so that a cramjam upgrade changing it is noticed."""
    out = bytearray(10)
    for module in (cramjam.lz4, cramjam.zstd):
        packed = compress(Compression.LZ4 if module is cramjam.lz4 else Compression.ZSTD, b"x" * 100)
        with pytest.raises(Exception, match="whole buffer"):
            module.decompress_into(packed, out)


# Bombs, in a child process with a small address space: 3 GiB of output could never be
# allocated there, so a pass proves that none of it was.
_BOMBS = textwrap.dedent(
    """
    import json, resource, struct, sys
    import cramjam
    from protocol.compression import (
        Compression, DecompressionLimitExceeded, compress, decompress,
    )
    resource.setrlimit(resource.RLIMIT_AS, (AS_BYTES, AS_BYTES))
    zeros = bytes(64 << 20)
    members = 48  # 48 x 64 MiB = 3 GiB once inflated
    bombs = {
        "gzip": compress(Compression.GZIP, zeros, 9) * members,
        "zstd": compress(Compression.ZSTD, zeros, 19) * members,
        "lz4": compress(Compression.LZ4, zeros) * members,
    }
    # snappy expands 21:1 at most: no real bomb, just more than the limit, in xerial framing
    chunk = bytes(cramjam.snappy.compress_raw(zeros[: 1 << 20]))
    bombs["snappy"] = b"\\x82SNAPPY\\x00" + struct.pack(">ii", 1, 1) + (
        struct.pack(">i", len(chunk)) + chunk
    ) * members
    del zeros
    out = {}
    for name, bomb in bombs.items():
        try:
            decompress(Compression[name.upper()], bomb)
            out[name] = ["accepted", len(bomb)]
        except DecompressionLimitExceeded as exc:
            out[name] = ["refused", len(bomb), str(exc)]
    # VmHWM, not ru_maxrss: the latter keeps the parent's size from before exec on Linux.
    with open("/proc/self/status") as status:
        hwm = [line for line in status if line.startswith("VmHWM:")][0]
    out["peak_rss_kb"] = int(hwm.split()[1])
    print(json.dumps(out))
    """
)


def test_bombs_are_refused_without_allocating_their_output(tmp_path: Path) -> None:
    limit = 1536 << 20  # 1.5 GiB of address space: the interpreter fits, a 3 GiB output does not
    script = tmp_path / "bombs.py"
    script.write_text(_BOMBS.replace("AS_BYTES", str(limit)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for name in ("gzip", "zstd", "lz4", "snappy"):
        verdict, size, *_ = result[name]
        assert verdict == "refused", (name, result[name])
    assert result["zstd"][1] < 200_000  # ~100 KB standing for 3 GiB
    # 64 MiB of zeros and the bombs (30 MB) were built in the child; beyond that only the
    # bounded output (16 MiB) may have been touched.
    assert result["peak_rss_kb"] * 1024 < 200 << 20, result["peak_rss_kb"]
