"""The group APIs byte-exact on the wire, across old and new versions (raw requests)."""

from __future__ import annotations

import threading
from typing import Any

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .harness import BrokerProcess
from .rawclient import RawClient

FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


def test_find_coordinator_batched_and_transaction_keys(broker: BrokerProcess) -> None:
    with RawClient(broker.port) as c:
        r = c.request(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["a", "b"])
        assert [(x.key, x.error_code, x.node_id, x.port) for x in r.coordinators] == [
            ("a", 0, 0, broker.port),
            ("b", 0, 0, broker.port),
        ]
        r = c.request(ApiKey.FIND_COORDINATOR, 0, key="old")
        assert (r.error_code, r.node_id, r.host, r.port) == (0, 0, "127.0.0.1", broker.port)
        # A transactional id is coordinated by this node too (__transaction_state, issue 16).
        r = c.request(ApiKey.FIND_COORDINATOR, 6, key_type=1, coordinator_keys=["txn"])
        assert [(x.key, x.error_code, x.node_id, x.port) for x in r.coordinators] == [
            ("txn", 0, 0, broker.port)
        ]
        r = c.request(ApiKey.FIND_COORDINATOR, 6, key_type=2, coordinator_keys=["x"])
        assert r.coordinators[0].error_code == ErrorCode.invalid_request


def _join(c: RawClient, version: int, group: str, member_id: str, **extra: Any) -> Any:
    fields: dict[str, Any] = dict(
        group_id=group, session_timeout=6000, rebalance_timeout=6000, member_id=member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=[dict(name="range", metadata=b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")],
        reason=None,
    )
    fields.update(extra)
    return c.request(ApiKey.JOIN_GROUP, version, **fields)


def test_join_sync_heartbeat_leave_across_versions(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    with RawClient(broker.port) as c:
        # JoinGroup v0 has no rebalance timeout: the session timeout stands in for it.
        r = _join(c, 0, "wire-v0", "")
        assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
        s = c.request(ApiKey.SYNC_GROUP, 0, group_id="wire-v0", generation_id=1, member_id=r.member_id,
                      assignments=[dict(member_id=r.member_id, assignment=b"A")])
        assert (s.error_code, s.assignment) == (0, b"A")
        h = c.request(ApiKey.HEARTBEAT, 0, group_id="wire-v0", generation_id=1, member_id=r.member_id)
        assert h.error_code == 0
        h = c.request(ApiKey.HEARTBEAT, 0, group_id="wire-v0", generation_id=7, member_id=r.member_id)
        assert h.error_code == ErrorCode.illegal_generation
        left = c.request(ApiKey.LEAVE_GROUP, 0, group_id="wire-v0", member_id=r.member_id)
        assert left.error_code == 0
        left = c.request(ApiKey.LEAVE_GROUP, 0, group_id="wire-v0", member_id="nobody")
        assert left.error_code == ErrorCode.unknown_member_id

        # v4+: a member without an id is given one and must rejoin with it (D3/D4).
        first = _join(c, 9, "wire-v9", "")
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        r = _join(c, 9, "wire-v9", first.member_id)
        assert r.error_code == 0 and r.protocol_type == "consumer" and r.protocol_name == "range"
        assert [m.member_id for m in r.members] == [first.member_id]
        s = c.request(ApiKey.SYNC_GROUP, 5, group_id="wire-v9", generation_id=r.generation_id,
                      member_id=r.member_id, group_instance_id=None, protocol_type="consumer",
                      protocol_name="range", assignments=[dict(member_id=r.member_id, assignment=b"B")])
        assert (s.error_code, s.protocol_name, s.assignment) == (0, "range", b"B")
        # The group is listed and described; it cannot be deleted while it has a member.
        listed = c.request(ApiKey.LIST_GROUPS, 5, states_filter=["stable"], types_filter=[])
        assert [(g.group_id, g.group_state) for g in listed.groups] == [("wire-v9", "Stable")]
        desc = c.request(ApiKey.DESCRIBE_GROUPS, 5, groups=["wire-v9", "unknown"],
                         include_authorized_operations=False)
        assert [(g.group_id, g.group_state, len(g.members)) for g in desc.groups] == [
            ("wire-v9", "Stable", 1), ("unknown", "Dead", 0)]
        assert desc.groups[0].members[0].member_assignment == b"B"
        assert [g.error_code for g in desc.groups] == [0, 0]
        # v6 (KIP-1043): the unknown group is an error with Kafka's message.
        desc = c.request(ApiKey.DESCRIBE_GROUPS, 6, groups=["wire-v9", "unknown"],
                         include_authorized_operations=False)
        assert [(g.group_id, g.group_state, g.error_code, g.error_message) for g in desc.groups] == [
            ("wire-v9", "Stable", 0, None),
            ("unknown", "Dead", ErrorCode.group_id_not_found, "Group unknown not found.")]
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, groups_names=["wire-v9", "unknown"])
        assert [(x.group_id, x.error_code) for x in deleted.results] == [
            ("wire-v9", ErrorCode.non_empty_group), ("unknown", ErrorCode.group_id_not_found)]
        # LeaveGroup v3+ batches members, each with its own answer (H3).
        left = c.request(ApiKey.LEAVE_GROUP, 5, group_id="wire-v9", members=[
            dict(member_id=r.member_id, group_instance_id=None, reason="done"),
            dict(member_id="ghost", group_instance_id=None, reason=None)])
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (r.member_id, 0), ("ghost", ErrorCode.unknown_member_id)]
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, groups_names=["wire-v9"])
        assert deleted.results[0].error_code == 0


def test_a_parked_join_does_not_hold_up_other_requests(broker: BrokerProcess) -> None:
    """A7/D12: with the default 3 s initial delay the first JoinGroup is parked; other
    connections, and later requests on other groups, are answered meanwhile."""
    done = threading.Event()
    result: list[Any] = []

    def parked() -> None:
        with RawClient(broker.port, timeout=30) as c:
            first = _join(c, 5, "slow", "")
            result.append(_join(c, 5, "slow", first.member_id))
        done.set()

    t = threading.Thread(target=parked)
    t.start()
    with RawClient(broker.port) as other:
        for _ in range(20):
            r = other.request(ApiKey.HEARTBEAT, 4, group_id="elsewhere", generation_id=1,
                              member_id="x", group_instance_id=None)
            assert r.error_code == ErrorCode.unknown_member_id
        assert not done.is_set()  # still parked by the initial rebalance delay (E3)
    t.join(30)
    assert done.is_set() and result[0].error_code == 0 and result[0].generation_id == 1
