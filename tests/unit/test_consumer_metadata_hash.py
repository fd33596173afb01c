"""KIP-1101 (Kafka 4.1): a consumer group's subscribed topics are tracked by a metadata hash in
its epoch record (ConsumerGroupMetadataValue, tagged field 0) instead of record 4
(ConsumerGroupPartitionMetadata). Each test names the rule it checks: the hash's algorithm and
byte layout (Kafka's computeTopicHash / computeGroupHash), what moves it, the epoch bump it
causes, record 4 never written, and a group loaded with an old record 4 and no hash."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import xxhash

from kcoord.broker.data.topics import TopicStore
from kcoord.broker.groups.topics_view import StoreTopics
from kcoord.coordinator.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    TopicMetadata,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from kcoord.coordinator.consumer.topics import TopicInfo, metadata_hash, topic_hash
from kcoord.coordinator.schemas import decode_key
from kcoord.coordinator.shard import GroupShard
from kcoord.storage.file_engine import FileEngine

from .test_consumer_group import Group, _random_activity, _state

FOO = TopicInfo(
    uuid.UUID(bytes=bytes(range(16))), "foo", 2, (("rack1", "rack0"), ("rack2", "rack1"))
)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _i32(v: int) -> bytes:
    return struct.pack("<i", v)


def _jstr(s: str) -> bytes:
    """hash4j's putString: UTF-16LE code units, then the length in units."""
    return s.encode("utf-16-le") + _i32(len(s))


def test_the_hash_function_is_xxh3_64_with_seed_0_as_kafkas_hash4j() -> None:
    # XXH3_64bits of the empty input: the xxHash reference's value, and hash4j's xxh3_64().
    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2 == 3244421341483603138


def test_topic_hash_has_kafkas_byte_layout() -> None:
    """computeTopicHash: magic byte 0, the topic id's most then least significant long, the
    name, the partition count, then per partition its index and its racks sorted, each as
    putInt(length) + putString; all little-endian. The bytes are spelled out here as UtilsTest
    feeds hash4j."""
    stream = (
        b"\x00"
        + bytes([7, 6, 5, 4, 3, 2, 1, 0])  # most significant bits of 00010203-0405-0607-...
        + bytes([15, 14, 13, 12, 11, 10, 9, 8])  # least significant bits
        + _jstr("foo")
        + _i32(2)
        + _i32(0) + _i32(5) + _jstr("rack0") + _i32(5) + _jstr("rack1")
        + _i32(1) + _i32(5) + _jstr("rack1") + _i32(5) + _jstr("rack2")
    )  # fmt: skip
    assert topic_hash(FOO) == _signed(xxhash.xxh3_64_intdigest(stream))
    # The value hash4j (the library Kafka hashes with) gives for the same calls, run from its
    # source under Java 17: Kafka's own hash of this topic.
    assert topic_hash(FOO) == 8068632560534658911


def test_topic_hash_of_a_long_stream_and_a_non_ascii_name_matches_kafkas() -> None:
    """Over 240 bytes (XXH3's long-input path) and a name of UTF-16 code units beyond ASCII:
    the value hash4j gives for the same topic."""
    topic_id = uuid.UUID("11111111-1111-1111-2222-222222222222")
    orders = TopicInfo(topic_id, "orders-\u00e9", 50, (("r1", "r0"),) * 50)
    assert topic_hash(orders) == -5841598377254956597


def test_group_hash_is_the_topic_hashes_in_name_order_and_0_without_topics() -> None:
    """computeGroupHash: 0 for no topics, else XXH3 over each topic hash (putLong) sorted by
    topic name."""
    bar = TopicInfo(uuid.UUID(int=1), "bar", 1)
    expected = xxhash.xxh3_64_intdigest(struct.pack("<qq", topic_hash(bar), topic_hash(FOO)))
    assert metadata_hash({"foo": FOO, "bar": bar}) == _signed(expected)
    # hash4j's values (as for FOO above): Kafka's hashes of "bar" and of the group.
    assert topic_hash(bar) == -7407264700876838811
    assert metadata_hash({"foo": FOO, "bar": bar}) == -5311529472301576386
    assert metadata_hash({}) == 0


def test_the_hash_moves_with_partition_count_racks_and_topic_id_but_not_rack_order() -> None:
    base = metadata_hash({"foo": FOO})
    grown = TopicInfo(FOO.topic_id, "foo", 3, FOO.racks)
    moved_rack = TopicInfo(FOO.topic_id, "foo", 2, (("rack1", "rack0"), ("rack2", "rack9")))
    recreated = TopicInfo(uuid.UUID(int=7), "foo", 2, FOO.racks)
    reordered = TopicInfo(FOO.topic_id, "foo", 2, (("rack0", "rack1"), ("rack1", "rack2")))
    assert len({base, *(metadata_hash({"foo": t}) for t in (grown, moved_rack, recreated))}) == 4
    assert metadata_hash({"foo": reordered}) == base


def test_a_partition_rack_change_bumps_the_group_epoch() -> None:
    g = Group({"t": 2})
    ra = g.hb("a", 0)
    before = g.group().metadata_hash
    g.topics.create("t", 2, racks=(("r1",), ("r2",)))
    g.hb("a", 2, topic_partitions=g.owned(ra))
    assert g.group().group_epoch == 3 and g.group().metadata_hash != before


def test_a_change_of_a_topic_the_group_does_not_subscribe_to_keeps_the_epoch() -> None:
    g = Group({"t": 2, "other": 1})
    ra = g.hb("a", 0)
    before = g.group().metadata_hash
    g.topics.create("other", 5, racks=(("r1",),))
    g.topics.create("new", 3)
    g.hb("a", 2, topic_partitions=g.owned(ra))
    assert g.group().group_epoch == 2 and g.group().metadata_hash == before


def test_the_epoch_record_carries_the_group_hash_in_tagged_field_0() -> None:
    g = Group({"t": 3})
    g.hb("a", 0)
    epochs = [v for k, v in g.log if isinstance(decode_key(k), ConsumerGroupMetadataKey)]
    assert epochs and epochs[-1] is not None
    value = decode_consumer_value(ConsumerGroupMetadataKey("g"), epochs[-1])
    topic = g.topics.topic("t")
    assert topic is not None
    assert value == ConsumerGroupMetadataValue(2, metadata_hash({"t": topic}))
    assert value.metadata_hash != 0


def test_record_4_is_never_written() -> None:
    for seed in range(4):
        g = _random_activity(seed)
        kinds = {type(decode_key(k)) for k, v in g.log if v is not None}
        assert ConsumerGroupMetadataKey in kinds
        assert ConsumerGroupPartitionMetadataKey not in kinds


def test_a_group_loaded_with_record_4_and_no_hash_rebalances_once_and_deletes_record_4() -> None:
    """A log written before KIP-1101: record 3 without MetadataHash and a record 4. Loaded, the
    group's hash is 0; its next heartbeat computes the hash, bumps the epoch (the hash
    differs, as in Kafka) and writes record 4's tombstone; later heartbeats write neither."""
    live = Group({"t": 4})
    ra = live.hb("a", 0)
    legacy: list[tuple[bytes, bytes | None]] = []
    for key, value in live.log:
        if isinstance(decode_key(key), ConsumerGroupMetadataKey) and value is not None:
            epoch = decode_consumer_value(ConsumerGroupMetadataKey("g"), value).epoch
            value = encode_consumer_value(ConsumerGroupMetadataValue(epoch))
        legacy.append((key, value))
    topic = live.topics.topic("t")
    assert topic is not None
    legacy.append((
        encode_consumer_key(ConsumerGroupPartitionMetadataKey("g")),
        encode_consumer_value(ConsumerGroupPartitionMetadataValue(
            (TopicMetadata(topic.topic_id, "t", 4),))),
    ))  # fmt: skip
    g = Group({"t": 4})
    g.shard = GroupShard(0, g.config, topics=g.topics)
    for key, value in legacy:
        g.shard.replay(key, value, 0)
    g.shard.finish_loading(0)
    g.log = list(legacy)
    assert g.group().metadata_hash == 0 and g.group().legacy_partition_metadata
    owned = g.owned(ra)
    g.hb("a", 2, topic_partitions=owned)
    assert (4, True) in g.kinds() and (3, False) in g.kinds()
    assert g.group().group_epoch == 3 and g.group().metadata_hash == metadata_hash({"t": topic})
    assert not g.group().legacy_partition_metadata
    g.hb("a", 3, topic_partitions=owned)
    assert not any(kind == 4 for kind, _ in g.kinds())
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    assert _state(fresh) == _state(g.shard)


def test_a_single_node_feeds_its_rack_to_every_partition(tmp_path: Path) -> None:
    engine = FileEngine(tmp_path)
    engine.start()
    store = TopicStore(engine, 1 << 20)
    try:
        store.create("orders", 3)
        info = StoreTopics(store, "r1").topic("orders")
        assert info is not None and [info.partition_racks(p) for p in range(3)] == [("r1",)] * 3
        bare = StoreTopics(store).topic("orders")
        assert bare is not None and bare.partition_racks(0) == ()
        assert metadata_hash({"orders": info}) != metadata_hash({"orders": bare})
    finally:
        store.close()
