"""OffsetCommit and OffsetFetch v10 name topics by id (KIP-848): the wire forms against kio's
schema classes and against kafka-python's codecs (generated from Kafka's own message schemas),
and the ids resolved to names through a real topic store (broker/groups/topic_ids.py)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kio.serial import entity_reader

from kcoord.broker.data.topics import TopicStore
from kcoord.broker.groups.topic_ids import (
    FetchTopics,
    named_commit_topics,
    resolve_fetch_topics,
    store_topic_id,
    unknown_topics_out,
)
from kcoord.protocol.apis import ApiKey, is_supported
from kcoord.protocol.codec import decode_request, encode_body, request_type, response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build
from kcoord.storage.file_engine import FileEngine

A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def _commit_request(version: int, **topic: Any) -> Any:
    topic_class = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic_class.OffsetCommitRequestPartition
    return OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=4, member_id="m", group_instance_id=None,
        topics=[topic_class(**topic, partitions=[partition(
            partition_index=2, committed_offset=42, committed_leader_epoch=7,
            committed_metadata="md")])],
    ).encode(version=version)


def test_both_apis_are_advertised_up_to_v10() -> None:
    for api in (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH):
        assert is_supported(api, 10) and not is_supported(api, 11)


def test_an_offset_commit_v10_names_its_topics_by_id_and_v9_by_name() -> None:
    req = decode_request(ApiKey.OFFSET_COMMIT, 10, bytes(_commit_request(10, topic_id=A)), 0)
    (topic,) = req.topics
    assert topic.topic_id == A and not hasattr(topic, "name")
    (p,) = topic.partitions
    assert (p.partition_index, p.committed_offset, p.committed_leader_epoch) == (2, 42, 7)
    assert p.committed_metadata == "md"
    old = decode_request(ApiKey.OFFSET_COMMIT, 9, bytes(_commit_request(9, name="t")), 0)
    assert old.topics[0].name == "t" and not hasattr(old.topics[0], "topic_id")


def test_offset_commit_v10_answers_carry_the_ids() -> None:
    # Built as the broker builds them: the fields of every version, those of v10 kept.
    entity = build(response_type(ApiKey.OFFSET_COMMIT, 10), throttle_time=0, topics=[
        dict(name="t", topic_id=A, partitions=[dict(partition_index=2, error_code=0)]),
        dict(name="", topic_id=B,
             partitions=[dict(partition_index=0, error_code=ErrorCode.unknown_topic_id)]),
    ])
    body = encode_body(entity)
    assert entity_reader(type(entity))(body, 0)[0] == entity  # kio reads back what was written
    answer = OffsetCommitResponse.decode(body, version=10)
    assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in answer.topics] == [(A, [(2, 0)]), (B, [(0, ErrorCode.unknown_topic_id)])]


def test_offset_fetch_v10_asks_and_answers_by_id() -> None:
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    topic = group.OffsetFetchRequestTopics
    wire = OffsetFetchRequest(groups=[
        group(group_id="g", member_id="m", member_epoch=3,
              topics=[topic(topic_id=A, partition_indexes=[0, 1])]),
        group(group_id="all", member_id=None, member_epoch=-1, topics=None),
    ], require_stable=True).encode(version=10)
    req = decode_request(ApiKey.OFFSET_FETCH, 10, bytes(wire), 0)
    assert req.groups[0].topics[0].topic_id == A
    assert tuple(req.groups[0].topics[0].partition_indexes) == (0, 1)
    assert req.groups[1].topics is None and req.require_stable

    entity = build(response_type(ApiKey.OFFSET_FETCH, 10), throttle_time=0, groups=[dict(
        group_id="g", error_code=0, topics=[dict(name="t", topic_id=A, partitions=[dict(
            partition_index=0, committed_offset=9, committed_leader_epoch=1, metadata="x",
            error_code=0)])] + unknown_topics_out(FetchTopics(None, {}, ((B, (5,)),))),
    )])
    body = encode_body(entity)
    assert entity_reader(type(entity))(body, 0)[0] == entity
    (answered,) = OffsetFetchResponse.decode(body, version=10).groups
    assert [(t.topic_id, p.partition_index, p.committed_offset, p.error_code)
            for t in answered.topics for p in t.partitions] == [
        (A, 0, 9, 0), (B, 5, -1, ErrorCode.unknown_topic_id)]


class _FetchTopic:
    """A topic of an OffsetFetch v10 group as kio decodes it."""

    def __init__(self, topic_id: uuid.UUID | None, partitions: tuple[int, ...]) -> None:
        self.topic_id, self.partition_indexes = topic_id, partitions


def _store(tmp_path: Path) -> TopicStore:
    engine = FileEngine(tmp_path)
    engine.start()
    store = TopicStore(engine, 1 << 20)
    store.create("orders", 3)
    return store


def test_ids_resolve_to_names_through_the_topic_store(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        orders = store.get("orders")
        assert orders is not None
        cls = request_type(ApiKey.OFFSET_COMMIT, 10)
        req = decode_request(ApiKey.OFFSET_COMMIT, 10, encode_body(build(
            cls, group_id="g", member_id="", topics=[
                dict(topic_id=tid, partitions=[dict(partition_index=0, committed_offset=1,
                                                    committed_metadata=None)])
                for tid in (orders.topic_id, A, None)])), 0)
        named = named_commit_topics(req.topics, store)
        # An unknown id, and the zero id (None), have no name: UNKNOWN_TOPIC_ID for them.
        assert [(t.name, t.topic_id) for t in named] == [
            ("orders", orders.topic_id), ("", A), ("", None)]
        assert named[0].partitions == req.topics[0].partitions

        asked = resolve_fetch_topics(
            [_FetchTopic(orders.topic_id, (0, 2)), _FetchTopic(A, (1,))], store)
        assert asked.wanted == (("orders", (0, 2)),)
        assert asked.ids == {"orders": orders.topic_id}
        assert asked.unknown == ((A, (1,)),)
        assert resolve_fetch_topics(None, store) == (None, {}, ())
        assert resolve_fetch_topics([_FetchTopic(A, (0,))], store).wanted == ()  # not "all"

        topic_id = store_topic_id(store)
        assert topic_id("orders") == orders.topic_id
        store.delete("orders")
        assert topic_id("orders") is None  # left out of a v10 answer for all topics
        assert named_commit_topics(req.topics[:1], store)[0].name == ""
    finally:
        store.close()
