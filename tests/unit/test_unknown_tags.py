"""Unknown tagged fields in flexible requests are skipped, as Kafka's protocol says (issue 19).

Each flexible request version kcoord accepts is encoded with an extra tagged field (a tag its
schema does not declare) in *every* struct, top level and nested, and must decode to what the
same request without them decodes to. The bodies come from a twin of each kio class with one
more tagged field, written by the project's own encoder (tests/integration/samples.py).
"""

from __future__ import annotations

import dataclasses

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import DecodeError, decode_request, encode_body, request_type
from kcoord.protocol.fastcodec import decoder, encoder
from kcoord.protocol.heartbeat import decode_heartbeat
from kcoord.protocol.tags import TagWalkError, strip_unknown_tags
from tests.integration.samples import flexible_versions, sample, tagged_body, to_twin, twin


@pytest.mark.parametrize(("api_key", "version"), flexible_versions())
def test_unknown_tags_are_skipped_on_every_flexible_request(api_key: int, version: int) -> None:
    plain, tagged = tagged_body(api_key, version)
    assert len(tagged) > len(plain)
    cls = request_type(api_key, version)
    with pytest.raises(Exception):  # noqa: B017 - kio alone refuses them (why this exists)
        decoder(cls)(tagged, 0)
    assert decode_request(api_key, version, tagged, 0) == decode_request(api_key, version, plain, 0)


@pytest.mark.parametrize(("api_key", "version"), flexible_versions())
def test_unknown_tags_are_stripped_exactly(api_key: int, version: int) -> None:
    plain, tagged = tagged_body(api_key, version)
    cls = request_type(api_key, version)
    assert strip_unknown_tags(cls, tagged, 0) == plain
    assert strip_unknown_tags(cls, plain, 0) is None  # nothing to drop: kio's path only
    prefix = b"header"
    assert strip_unknown_tags(cls, prefix + tagged, len(prefix)) == plain


def test_known_tags_are_kept_and_unknown_ones_beside_them_dropped() -> None:
    # Fetch v12's cluster_id (tag 0) is the one declared tag of a served request.
    entity = dataclasses.replace(sample(request_type(ApiKey.FETCH, 12)), cluster_id="c1")
    tagged = encoder(twin(type(entity)))(to_twin(entity))
    assert decode_request(ApiKey.FETCH, 12, tagged, 0) == entity


def test_several_unknown_tags_with_long_sizes() -> None:
    cls = request_type(ApiKey.HEARTBEAT, 4)
    body = encode_body(cls(group_id="g", generation_id=1, member_id="m", group_instance_id=None))
    # two unknown tags, the second with a two-byte tag number and a two-byte size
    tagged = body[:-1] + bytes([2, 7, 1, 0xAA, 0x89, 0x01, 0x81, 0x01]) + bytes(129)
    assert decode_request(ApiKey.HEARTBEAT, 4, tagged, 0) == decode_request(
        ApiKey.HEARTBEAT, 4, body, 0
    )


def test_heartbeat_fast_path_leaves_unknown_tags_to_the_generic_path() -> None:
    cls = request_type(ApiKey.HEARTBEAT, 4)
    body = encode_body(cls(group_id="g", generation_id=7, member_id="m", group_instance_id=None))
    header = b"\x00\x0c\x00\x04\x00\x00\x00\x01\x00\x01c"
    for head_tags in (b"\x00", b"\x01\x05\x02hi"):
        frame = header + head_tags + body[:-1] + bytes([1, 3, 1, 0])
        assert decode_heartbeat(frame, 4) == ("g", 7, "m", None)


def test_a_truncated_unknown_tag_is_still_refused() -> None:
    cls = request_type(ApiKey.HEARTBEAT, 4)
    body = encode_body(cls(group_id="g", generation_id=1, member_id="m", group_instance_id=None))
    bad = body[:-1] + bytes([1, 99, 5, 1])  # claims 5 bytes, has 1
    with pytest.raises(TagWalkError):
        strip_unknown_tags(cls, bad, 0)
    with pytest.raises(DecodeError):
        decode_request(ApiKey.HEARTBEAT, 4, bad, 0)
