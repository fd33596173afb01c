"""ShareFetch (78) and ShareAcknowledge (79) against a real broker, with raw requests (issue 29):
records acquired by one member at a time, ACCEPT/RELEASE/REJECT, lock expiry, the delivery-count
limit, share session epochs, bad acknowledgements, and a closed connection's records released.

The share partitions start at ``latest`` (no group config here), so each test opens its members'
sessions on the empty topic first and produces after."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.batch import iter_headers
from kcoord.protocol.errors import ErrorCode

from .clients import create_topic, produce_confluent
from .harness import BrokerProcess, free_port, wait_for
from .rawclient import RawClient
from .test_acls import PASSWORDS, _accepting, admin_of, allow, raw
from .test_acls import create_topic as create_as_admin
from .test_sasl import kcoord_users

ACCEPT, RELEASE, REJECT = 1, 2, 3
SETTINGS = {
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": 1000,
    "group.share.delivery.count.limit": 2,
}


class Member:
    """One share consumer speaking raw ShareFetch/ShareAcknowledge v2 on its own connection."""

    def __init__(self, port: int, group: str, topic_id: uuid.UUID, partitions: list[int]) -> None:
        self.client = RawClient(port)
        self.group = group
        self.member_id = uuid.uuid4().hex
        self.topic_id = topic_id
        self.partitions = partitions
        self.epoch = 0

    def close(self) -> None:
        self.client.close()

    def fetch(
        self,
        acks: dict[int, list[dict[str, Any]]] | None = None,
        max_wait_ms: int = 0,
        max_records: int = 500,
        epoch: int | None = None,
    ) -> Any:
        """A ShareFetch: every partition when opening the session, later only those
        acknowledged; the member's epoch moves on when the broker took it."""
        acks = acks or {}
        named = self.partitions if self.epoch == 0 else sorted(acks)
        sent_epoch = self.epoch if epoch is None else epoch
        topics = (
            [dict(topic_id=self.topic_id, partitions=[
                dict(partition_index=p, acknowledgement_batches=acks.get(p, [])) for p in named
            ])]
            if named else []
        )
        resp = self.client.request(
            ApiKey.SHARE_FETCH, 2, group_id=self.group, member_id=self.member_id,
            share_session_epoch=sent_epoch, max_wait=max_wait_ms, min_bytes=1,
            max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
            topics=topics, forgotten_topics_data=[],
        )
        if resp.error_code == 0 and sent_epoch == self.epoch and sent_epoch >= 0:
            self.epoch += 1
        return resp

    def acknowledge(self, acks: dict[int, list[dict[str, Any]]], final: bool = False) -> Any:
        resp = self.client.request(
            ApiKey.SHARE_ACKNOWLEDGE, 2, group_id=self.group, member_id=self.member_id,
            share_session_epoch=-1 if final else self.epoch,
            topics=[dict(topic_id=self.topic_id, partitions=[
                dict(partition_index=p, acknowledgement_batches=b) for p, b in sorted(acks.items())
            ])],
        )
        if resp.error_code == 0 and not final:
            self.epoch += 1
        return resp


def acquired(resp: Any) -> list[tuple[int, int, int, int]]:
    """(partition, first, last, delivery count) of every acquired range, checking that the
    answer's batches hold each range's offsets."""
    assert resp.error_code == 0, resp
    out = []
    for topic in resp.responses:
        for p in topic.partitions:
            assert p.error_code == 0, p
            covered = [(h.base_offset, h.last_offset) for _, h in iter_headers(p.records)]
            for r in p.acquired_records:
                for offset in range(r.first_offset, r.last_offset + 1):
                    assert any(lo <= offset <= hi for lo, hi in covered), (offset, covered)
                out.append((p.partition_index, r.first_offset, r.last_offset, r.delivery_count))
    return sorted(out)


def offsets(resp: Any) -> list[int]:
    return [o for _, first, last, _ in acquired(resp) for o in range(first, last + 1)]


def ack_codes(resp: Any, field: str = "acknowledge_error_code") -> dict[int, int]:
    return {p.partition_index: getattr(p, field) for t in resp.responses for p in t.partitions}


def batch(first: int, last: int, *types: int) -> dict[str, Any]:
    return dict(first_offset=first, last_offset=last, acknowledge_types=list(types))


def topic_id(port: int, name: str) -> uuid.UUID:
    with RawClient(port) as c:
        md = c.request(ApiKey.METADATA, 12, topics=[dict(name=name, topic_id=None)],
                       allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return uuid.UUID(str(md.topics[0].topic_id))


def produce(broker: BrokerProcess, topic: str, count: int, partition: int = 0, start: int = 0) -> None:
    produce_confluent(
        broker.bootstrap, topic,
        [(partition, None, f"v{i}".encode()) for i in range(start, start + count)], "none",
    )


def fetch_until(member: Member, want: int, timeout: float = 20.0) -> list[int]:
    """Offsets acquired by long-polling fetches until ``want`` of them came."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += offsets(member.fetch(max_wait_ms=1000))
    return got


@pytest.fixture
def broker(broker_factory: Any) -> BrokerProcess:
    return broker_factory(SETTINGS)  # type: ignore[no-any-return]


@pytest.fixture
def members(broker: BrokerProcess) -> Iterator[tuple[Member, Member]]:
    """Two members of group ``g`` on the one partition of topic ``t``, sessions open."""
    create_topic(broker.bootstrap, "t", 1)
    tid = topic_id(broker.port, "t")
    a, b = Member(broker.port, "g", tid, [0]), Member(broker.port, "g", tid, [0])
    try:
        for m in (a, b):
            assert acquired(m.fetch()) == []
        yield a, b
    finally:
        a.close()
        b.close()


def test_records_are_acquired_once_across_two_members(broker: BrokerProcess, members: Any) -> None:
    a, b = members
    # A long poll is answered when records arrive, not at its end.
    started = time.monotonic()
    waiting = a.client.send_request(
        ApiKey.SHARE_FETCH, 2, group_id="g", member_id=a.member_id, share_session_epoch=a.epoch,
        max_wait=20000, min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500,
        topics=[], forgotten_topics_data=[],
    )
    produce(broker, "t", 10)
    got = offsets(a.client.response(ApiKey.SHARE_FETCH, 2, waiting))
    a.epoch += 1
    assert time.monotonic() - started < 15
    got += fetch_until(a, 10 - len(got))
    assert got == list(range(10))
    assert offsets(b.fetch(max_wait_ms=300)) == []
    # Accepted records never come back; new ones go to whoever asks.
    assert ack_codes(a.fetch({0: [batch(0, 9, ACCEPT)]})) == {0: 0}
    produce(broker, "t", 5, start=10)
    assert fetch_until(b, 5) == list(range(10, 15))
    assert offsets(a.fetch(max_wait_ms=300)) == []


def test_release_comes_back_with_delivery_count_2_accept_and_reject_never(
    broker: BrokerProcess, members: Any
) -> None:
    a, b = members
    produce(broker, "t", 3)
    assert fetch_until(a, 3) == [0, 1, 2]
    resp = a.acknowledge({0: [batch(0, 2, ACCEPT, RELEASE, REJECT)]})
    assert resp.error_code == 0
    assert ack_codes(resp, "error_code") == {0: 0}
    again = b.fetch(max_wait_ms=2000)
    assert acquired(again) == [(0, 1, 1, 2)]
    assert b.fetch({0: [batch(1, 1, ACCEPT)]}).error_code == 0
    assert offsets(a.fetch(max_wait_ms=300)) == []


def test_an_expired_lock_brings_records_to_another_member(broker: BrokerProcess, members: Any) -> None:
    a, b = members
    produce(broker, "t", 4)
    assert fetch_until(a, 4) == [0, 1, 2, 3]
    started = time.monotonic()
    resp = b.fetch(max_wait_ms=5000)  # waits for the 1 s lock to pass
    assert acquired(resp) == [(0, 0, 3, 2)]
    assert time.monotonic() - started >= 0.5
    # The first member's acknowledgement comes too late: refused, and nothing changes.
    late = a.fetch({0: [batch(0, 3, ACCEPT)]})
    assert ack_codes(late) == {0: ErrorCode.invalid_record_state}
    assert ack_codes(b.fetch({0: [batch(0, 3, ACCEPT)]})) == {0: 0}


def test_past_the_delivery_count_limit_a_record_is_archived(
    broker: BrokerProcess, members: Any
) -> None:
    a, b = members
    produce(broker, "t", 1)
    assert fetch_until(a, 1) == [0]
    # (ShareAcknowledge: a ShareFetch releasing it would acquire it again at once)
    assert a.acknowledge({0: [batch(0, 0, RELEASE)]}).error_code == 0
    assert acquired(b.fetch(max_wait_ms=2000)) == [(0, 0, 0, 2)]
    # Released at the limit (2 deliveries): archived, never delivered again.
    assert ack_codes(b.fetch({0: [batch(0, 0, RELEASE)]})) == {0: 0}
    assert offsets(a.fetch(max_wait_ms=500)) == []
    produce(broker, "t", 1, start=1)
    assert fetch_until(a, 1) == [1]


def test_stale_session_epochs_are_refused(broker: BrokerProcess, members: Any) -> None:
    a, _ = members
    assert a.epoch == 1
    for wrong in (2, 5, -7):
        assert a.fetch(epoch=wrong).error_code == ErrorCode.invalid_share_session_epoch
    assert a.fetch().error_code == 0  # the right one still works: now 2
    assert a.fetch(epoch=1).error_code == ErrorCode.invalid_share_session_epoch
    resp = a.client.request(
        ApiKey.SHARE_ACKNOWLEDGE, 2, group_id="g", member_id=a.member_id, share_session_epoch=1,
        topics=[],
    )
    assert resp.error_code == ErrorCode.invalid_share_session_epoch
    assert a.acknowledge({}).error_code == 0  # epoch 2
    stranger = Member(broker.port, "g", a.topic_id, [0])
    try:
        stranger.epoch = 3
        assert stranger.fetch().error_code == ErrorCode.share_session_not_found
        assert stranger.acknowledge({0: [batch(0, 0, ACCEPT)]}).error_code == (
            ErrorCode.share_session_not_found
        )
    finally:
        stranger.close()


def test_bad_acknowledgements_are_invalid_record_state_and_change_nothing(
    broker: BrokerProcess, members: Any
) -> None:
    a, b = members
    produce(broker, "t", 4)
    assert fetch_until(a, 4) == [0, 1, 2, 3]
    bad = [
        [batch(0, 3, ACCEPT)],  # another member's records
    ]
    for acks in bad:
        assert ack_codes(b.fetch({0: acks})) == {0: ErrorCode.invalid_record_state}
    for acks in (
        [batch(2, 9, ACCEPT)],  # past what was ever acquired
        [batch(0, 999_999, ACCEPT)],  # a million records, nearly all never acquired
        [batch(0, 1, ACCEPT), batch(1, 1, ACCEPT)],  # duplicated (overlapping)
    ):
        code = ack_codes(a.fetch({0: acks}))[0]
        assert code in (ErrorCode.invalid_record_state, ErrorCode.invalid_request), acks
    # Nothing changed: the records are still a's, all four of them, and b gets none.
    assert offsets(b.fetch(max_wait_ms=300)) == []
    assert ack_codes(a.fetch({0: [batch(0, 3, ACCEPT)]})) == {0: 0}
    # Now accepted: acknowledging them again is refused.
    assert ack_codes(a.fetch({0: [batch(0, 0, ACCEPT)]})) == {0: ErrorCode.invalid_record_state}


def test_requests_the_broker_refuses(broker: BrokerProcess, members: Any) -> None:
    a, _ = members
    with RawClient(broker.port) as c:
        empty = c.request(
            ApiKey.SHARE_FETCH, 2, group_id="g", member_id="", share_session_epoch=0,
            max_wait=0, min_bytes=1, max_bytes=1000, max_records=10, batch_size=10,
            topics=[], forgotten_topics_data=[],
        )
        assert empty.error_code == ErrorCode.invalid_request
        unknown = uuid.uuid4()
        resp = c.request(
            ApiKey.SHARE_FETCH, 1, group_id="g", member_id="x", share_session_epoch=0,
            max_wait=0, min_bytes=1, max_bytes=1000, max_records=10, batch_size=10,
            topics=[
                dict(topic_id=unknown, partitions=[dict(partition_index=0, acknowledgement_batches=[])]),
                dict(topic_id=a.topic_id, partitions=[dict(partition_index=7, acknowledgement_batches=[])]),
            ],
            forgotten_topics_data=[],
        )
        assert resp.error_code == 0
        codes = {(uuid.UUID(str(t.topic_id)), p.partition_index): p.error_code
                 for t in resp.responses for p in t.partitions}
        assert codes == {
            (unknown, 0): ErrorCode.unknown_topic_id,
            (a.topic_id, 7): ErrorCode.unknown_topic_or_partition,
        }
        # Acknowledgements may not open a session.
        opening = c.request(
            ApiKey.SHARE_FETCH, 2, group_id="g", member_id="y", share_session_epoch=0,
            max_wait=0, min_bytes=1, max_bytes=1000, max_records=10, batch_size=10,
            topics=[dict(topic_id=a.topic_id, partitions=[
                dict(partition_index=0, acknowledgement_batches=[batch(0, 0, ACCEPT)])])],
            forgotten_topics_data=[],
        )
        assert opening.error_code == ErrorCode.invalid_request
    # RENEW is refused in v1 and without is_renew_ack.
    assert ack_codes(a.fetch({0: [batch(0, 0, 4)]})) == {0: ErrorCode.invalid_request}


def test_a_closed_connection_releases_its_records_and_a_final_request_closes(
    broker: BrokerProcess, members: Any
) -> None:
    a, b = members
    produce(broker, "t", 2)
    assert fetch_until(a, 2) == [0, 1]
    # Its session goes with its connection and its records come back at once, well before
    # their 1 s lock would have passed.
    a.close()
    assert acquired(b.fetch(max_wait_ms=500)) == [(0, 0, 1, 2)]
    # A final ShareAcknowledge accepts one record and closes the session (the other record,
    # released with it at its second delivery, is archived: the limit is 2).
    final = b.acknowledge({0: [batch(0, 0, ACCEPT)]}, final=True)
    assert final.error_code == 0
    assert ack_codes(final, "error_code") == {0: 0}
    assert b.fetch().error_code == ErrorCode.share_session_not_found
    c = Member(broker.port, "g", b.topic_id, [0])
    try:
        assert offsets(c.fetch(max_wait_ms=300)) == []
        assert offsets(c.fetch(max_wait_ms=1500)) == []
    finally:
        c.close()


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    """A broker with an authorizer: ``admin`` is a super user, ``alice`` has what a test
    allows her (SASL listener)."""
    data = tmp_path / "data"
    for user, password in PASSWORDS.items():
        assert kcoord_users("add", user, "--password", password, "--data-dir", str(data)).returncode == 0
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(data, {
        **SETTINGS,
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    })
    b.port = plain
    b.start()
    wait_for(lambda: _accepting(sasl), 30, what="the SASL listener")
    try:
        yield b, sasl
    finally:
        b.stop()


def test_share_requests_need_read_on_the_group_and_the_topic(acl_broker: Any) -> None:
    _, sasl = acl_broker
    admin = admin_of(sasl, "admin")
    create_as_admin(sasl, "t")
    md = raw(sasl, "admin", ApiKey.METADATA, 12, topics=[dict(name="t", topic_id=None)],
             allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    tid = md.topics[0].topic_id

    def fetch() -> Any:
        return raw(sasl, "alice", ApiKey.SHARE_FETCH, 2, group_id="g", member_id="m",
                   share_session_epoch=0, max_wait=0, min_bytes=1, max_bytes=1000,
                   max_records=10, batch_size=10, forgotten_topics_data=[],
                   topics=[dict(topic_id=tid, partitions=[
                       dict(partition_index=0, acknowledgement_batches=[])])])

    def acknowledge() -> Any:
        return raw(sasl, "alice", ApiKey.SHARE_ACKNOWLEDGE, 2, group_id="g", member_id="m",
                   share_session_epoch=1, topics=[])

    assert fetch().error_code == ErrorCode.group_authorization_failed
    assert acknowledge().error_code == ErrorCode.group_authorization_failed
    allow(admin, ("GROUP", "g", "LITERAL", "READ", "ALLOW"))
    resp = fetch()
    assert resp.error_code == 0
    assert ack_codes(resp, "error_code") == {0: ErrorCode.topic_authorization_failed}
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"))
    resp = fetch()
    assert ack_codes(resp, "error_code") == {0: 0}
    # Its connection closed, the session is gone.
    assert acknowledge().error_code == ErrorCode.share_session_not_found
