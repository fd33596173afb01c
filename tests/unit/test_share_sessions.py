"""The share session cache (kcoord.share.sessions): opening, moving on, closing, and Kafka's
session errors."""

from __future__ import annotations

import uuid

import pytest

from kcoord.protocol.errors import ErrorCode
from kcoord.share.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSessionCache,
    ShareSessionError,
    next_epoch,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def _open(cache: ShareSessionCache, member: str = "m1", parts=((T1, 0),), owner: object = "conn1"):
    return cache.for_fetch("g", member, INITIAL_EPOCH, list(parts), [], False, owner)


def _error(call) -> int:
    with pytest.raises(ShareSessionError) as e:
        call()
    return e.value.code


def test_epoch_zero_opens_a_session_whose_next_epoch_is_one() -> None:
    cache = ShareSessionCache(10)
    use = _open(cache, parts=[(T1, 0), (T1, 1)])
    assert not use.final
    assert use.session.epoch == 1
    assert use.fetch_partitions() == [(T1, 0), (T1, 1)]
    assert len(cache) == 1


def test_later_requests_carry_the_next_epoch_and_grow_and_shrink_the_session() -> None:
    cache = ShareSessionCache(10)
    _open(cache)
    use = cache.for_fetch("g", "m1", 1, [(T2, 3)], [], False, "conn1")
    assert use.fetch_partitions() == [(T1, 0), (T2, 3)]
    assert use.session.epoch == 2
    use = cache.for_fetch("g", "m1", 2, [], [(T1, 0)], True, "conn1")
    assert use.fetch_partitions() == [(T2, 3)]
    assert use.session.epoch == 3


def test_a_stale_or_future_epoch_is_invalid_share_session_epoch_and_changes_nothing() -> None:
    cache = ShareSessionCache(10)
    _open(cache)
    cache.for_fetch("g", "m1", 1, [], [], False, "conn1")
    for stale in (1, 3, 7):
        code = _error(lambda e=stale: cache.for_fetch("g", "m1", e, [(T2, 0)], [], False, "c"))
        assert code == ErrorCode.invalid_share_session_epoch
    session = cache.get("g", "m1")
    assert session is not None and session.epoch == 2
    assert list(session.partitions) == [(T1, 0)]


def test_no_session_for_a_later_or_final_epoch_is_share_session_not_found() -> None:
    cache = ShareSessionCache(10)
    assert _error(lambda: cache.for_fetch("g", "m", 1, [], [], False, "c")) == (
        ErrorCode.share_session_not_found
    )
    assert _error(lambda: cache.for_fetch("g", "m", FINAL_EPOCH, [], [], True, "c")) == (
        ErrorCode.share_session_not_found
    )
    assert _error(lambda: cache.for_acknowledge("g", "m", 4)) == ErrorCode.share_session_not_found
    assert _error(lambda: cache.for_acknowledge("g", "m", FINAL_EPOCH)) == (
        ErrorCode.share_session_not_found
    )


def test_opening_with_acknowledgements_is_invalid_request() -> None:
    cache = ShareSessionCache(10)
    code = _error(lambda: cache.for_fetch("g", "m", INITIAL_EPOCH, [(T1, 0)], [], True, "c"))
    assert code == ErrorCode.invalid_request
    assert len(cache) == 0


def test_epoch_zero_again_replaces_the_session() -> None:
    cache = ShareSessionCache(10)
    _open(cache, parts=[(T1, 0)])
    cache.for_fetch("g", "m1", 1, [], [], False, "conn1")
    use = _open(cache, parts=[(T2, 1)], owner="conn2")
    assert use.session.epoch == 1
    assert use.fetch_partitions() == [(T2, 1)]
    assert len(cache) == 1
    assert cache.connection_closed("conn1") == []  # the session moved to conn2


def test_the_session_limit_is_share_session_limit_reached() -> None:
    cache = ShareSessionCache(2)
    _open(cache, "m1")
    _open(cache, "m2")
    assert _error(lambda: _open(cache, "m3")) == ErrorCode.share_session_limit_reached
    assert len(cache) == 2
    _open(cache, "m1")  # re-opening one held takes its own place
    assert len(cache) == 2


def test_the_final_epoch_fetches_nothing_and_leaves_the_epoch() -> None:
    cache = ShareSessionCache(10)
    _open(cache)
    use = cache.for_fetch("g", "m1", FINAL_EPOCH, [(T2, 0)], [], True, "conn1")
    assert use.final
    assert use.fetch_partitions() == []
    assert use.session.epoch == 1
    assert list(use.session.partitions) == [(T1, 0)]


def test_share_acknowledge_moves_the_epoch_on_and_cannot_open() -> None:
    cache = ShareSessionCache(10)
    assert _error(lambda: cache.for_acknowledge("g", "m1", INITIAL_EPOCH)) == (
        ErrorCode.invalid_share_session_epoch
    )
    _open(cache)
    assert not cache.for_acknowledge("g", "m1", 1).final
    assert _error(lambda: cache.for_acknowledge("g", "m1", 1)) == (
        ErrorCode.invalid_share_session_epoch
    )
    assert cache.for_fetch("g", "m1", 2, [], [], True, "conn1").session.epoch == 3
    assert cache.for_acknowledge("g", "m1", FINAL_EPOCH).final


def test_a_closed_connection_takes_its_sessions() -> None:
    cache = ShareSessionCache(10)
    _open(cache, "m1", owner="a")
    _open(cache, "m2", owner="b")
    cache.for_fetch("h", "m3", INITIAL_EPOCH, [], [], False, "a")
    gone = cache.connection_closed("a")
    assert sorted(s.key for s in gone) == [("g", "m1"), ("h", "m3")]
    assert cache.get("g", "m2") is not None
    assert len(cache) == 1


def test_deleted_topics_leave_every_session() -> None:
    cache = ShareSessionCache(10)
    _open(cache, "m1", parts=[(T1, 0), (T2, 0)])
    _open(cache, "m2", parts=[(T1, 1)])
    cache.forget_topics([T1])
    assert cache.for_fetch("g", "m1", 1, [], [], False, "c").fetch_partitions() == [(T2, 0)]
    assert cache.for_fetch("g", "m2", 1, [], [], False, "c").fetch_partitions() == []


def test_remove_forgets_the_session() -> None:
    cache = ShareSessionCache(10)
    _open(cache)
    assert cache.remove("g", "m1") is not None
    assert cache.remove("g", "m1") is None
    assert len(cache) == 0


def test_next_epoch_wraps_to_one() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
