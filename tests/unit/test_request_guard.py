"""The bounded pre-pass in front of kio's native request reader (protocol/guard.py).

Hardening issue, finding 1: an array length was trusted before anything was read, so a
27-byte request made the native reader reserve tens of gigabytes and the process abort.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import DecodeError, decode_request, encode_body, request_type
from kcoord.protocol.guard import GuardError, guard
from kcoord.protocol.legacy import decode_legacy_produce, decode_offset_commit_v0_v1
from kcoord.protocol.responses import build
from tests.integration.samples import array_entries, sample, sample_bodies

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = list(sample_bodies())


@pytest.mark.parametrize(("api_key", "version", "body"), SAMPLES, ids=lambda x: str(x)[:12])
def test_every_served_request_version_passes_and_decodes_unchanged(
    api_key: int, version: int, body: bytes
) -> None:
    cls = request_type(api_key, version)
    check = guard(cls)
    if check is None:  # no arrays: nothing for the pre-pass to check
        assert array_entries(cls) == 0
    else:
        assert check(body, 0, 10_000) == array_entries(cls)
    assert decode_request(api_key, version, body, 0) == sample(cls)


@pytest.mark.parametrize(("api_key", "version", "body"), SAMPLES, ids=lambda x: str(x)[:12])
def test_every_truncation_is_refused(api_key: int, version: int, body: bytes) -> None:
    for cut in range(len(body)):
        with pytest.raises(DecodeError):
            decode_request(api_key, version, body[:cut], 0)


def test_a_compact_array_claiming_four_billion_entries_is_refused() -> None:
    # ListGroups v4, the 27-byte request of the finding: the states filter claims 0xFFFFFFFE.
    body = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00"
    with pytest.raises(DecodeError, match="claims 4294967294 entries"):
        decode_request(ApiKey.LIST_GROUPS, 4, body, 0)


def test_a_legacy_array_claiming_more_than_the_frame_holds_is_refused() -> None:
    # ListOffsets v1: topics claims 2**31-1 entries of at least 6 bytes; 10 bytes follow.
    body = struct.pack(">ii", -1, 2**31 - 1) + b"x" * 10
    with pytest.raises(DecodeError, match="claims 2147483647 entries"):
        decode_request(ApiKey.LIST_OFFSETS, 1, body, 0)
    # Exactly as many minimal entries as the bytes allow is not a lie: it gets to kio.
    cls = request_type(ApiKey.LIST_OFFSETS, 1)
    one_topic = encode_body(sample(cls))
    check = guard(cls)
    assert check is not None and check(one_topic, 0, 100) == array_entries(cls)


def test_null_is_refused_where_the_schema_has_no_null_array() -> None:
    # ListOffsets v1 topics (not nullable): length -1.
    with pytest.raises(DecodeError, match="null array ListOffsetsRequest.topics"):
        decode_request(ApiKey.LIST_OFFSETS, 1, struct.pack(">ii", -1, -1), 0)
    # OffsetCommit v8 topics (compact, not nullable): length varint 0.
    cls = request_type(ApiKey.OFFSET_COMMIT, 8)
    empty = encode_body(build(cls, group_id="g", generation_id_or_member_epoch=-1,
                              member_id="", group_instance_id=None, topics=[]))
    null = empty[:-2] + b"\x00" + empty[-1:]  # the topics length byte (1 = empty) made 0
    assert empty[-2] == 1
    with pytest.raises(DecodeError, match="null array OffsetCommitRequest.topics"):
        decode_request(ApiKey.OFFSET_COMMIT, 8, null, 0)


def test_null_stays_allowed_where_the_schema_allows_it() -> None:
    # Metadata v4+: null topics means "all topics".
    cls = request_type(ApiKey.METADATA, 4)
    body = encode_body(build(cls, topics=None, allow_auto_topic_creation=True))
    assert decode_request(ApiKey.METADATA, 4, body, 0).topics is None


def _commit(partitions: int, version: int = 8) -> bytes:
    cls = request_type(ApiKey.OFFSET_COMMIT, version)
    return encode_body(
        build(
            cls,
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time_ms=-1,
            topics=[
                dict(
                    name="t",
                    partitions=[
                        dict(
                            partition_index=i,
                            committed_offset=i,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for i in range(partitions)
                    ],
                )
            ],
        )
    )


@pytest.mark.parametrize("version", [2, 8])
def test_the_element_limit_counts_every_array_entry(version: int) -> None:
    body = _commit(10, version)  # 1 topic + 10 partitions
    assert len(decode_request(ApiKey.OFFSET_COMMIT, version, body, 0, max_elements=11).topics) == 1
    with pytest.raises(DecodeError, match="socket.request.max.elements"):
        decode_request(ApiKey.OFFSET_COMMIT, version, body, 0, max_elements=10)


def test_legacy_decoders_check_counts_nulls_and_the_element_limit() -> None:
    # OffsetCommit v0: group "g", topics [ "t" [ 0, offset 5, metadata "" ] ].
    body = (
        struct.pack(">h", 1) + b"g" + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
        + struct.pack(">iiqh", 1, 0, 5, 0)
    )  # fmt: skip
    assert decode_offset_commit_v0_v1(body, 0, 0).topics[0].partitions[0].committed_offset == 5
    with pytest.raises(ValueError, match="socket.request.max.elements"):
        decode_offset_commit_v0_v1(body, 0, 0, max_elements=1)
    lying = body[:3] + struct.pack(">i", 2**31 - 1) + body[7:]
    with pytest.raises(ValueError, match="claims 2147483647 entries"):
        decode_offset_commit_v0_v1(lying, 0, 0)
    null = body[:3] + struct.pack(">i", -1)
    with pytest.raises(ValueError, match="null array"):
        decode_offset_commit_v0_v1(null, 0, 0)
    # Produce v0: acks, timeout, topics: a null topics array does not parse.
    assert decode_legacy_produce(struct.pack(">hii", 1, 1000, -1), 0) is None


def test_a_guard_error_is_a_value_error() -> None:
    # The connection closes on DecodeError; GuardError never escapes decode_request.
    assert issubclass(GuardError, ValueError)


_MUTATE = textwrap.dedent(
    """
    import struct, sys
    sys.path.insert(0, sys.argv[1])
    from protocol.codec import DecodeError, decode_request
    from tests.integration.samples import sample_bodies

    cases = 0
    for api_key, version, body in sample_bodies():
        variants = []
        for i in range(len(body)):
            for b in (0x00, 0x01, 0x7F, 0x80, 0xFF):
                variants.append(body[:i] + bytes([b]) + body[i + 1 :])
            for word in (b"\\xff\\xff\\xff\\x0f", b"\\x7f\\xff\\xff\\xff", b"\\xff\\xff\\xff\\xff"):
                variants.append(body[:i] + word + body[i + len(word) :])
        for v in variants:
            cases += 1
            try:
                decode_request(api_key, version, v, 0)
            except DecodeError:
                pass
    print(cases)
    """
)


def test_mutated_bodies_of_every_version_never_abort_the_decoder() -> None:
    """Every sample body with each byte (and each 4-byte window) overwritten by the values
    that make lengths lie, decoded under a 1 GiB address-space limit: an allocation the
    guard lets through would abort the child process."""
    proc = subprocess.run(
        ["prlimit", f"--as={1024**3}", sys.executable, "-c", _MUTATE, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.strip()) > 10_000
