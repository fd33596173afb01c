"""The share session cache (KIP-932): which share partitions each share consumer fetches from.

A share consumer's ShareFetch requests form a session, keyed by (group id, member id). Epoch 0
opens one (replacing any the member had, and refused while acknowledgements ride along: there is
nothing acquired yet to acknowledge); each later request carries the session's next epoch, adds
the partitions it names and drops its ``forgotten_topics_data``; epoch -1 is the member's last
request, acknowledgements only, after which the broker removes the session and releases what the
member still holds. ShareAcknowledge takes an epoch too, but never opens a session.

Errors, as Kafka answers them: no session for a later epoch or for -1 is SHARE_SESSION_NOT_FOUND;
a later epoch other than the session's next one is INVALID_SHARE_SESSION_EPOCH (and ShareAcknowledge
with epoch 0); no room for a new session (``group.share.max.share.sessions``) is
SHARE_SESSION_LIMIT_REACHED. A session belongs to the connection that opened it: when that
connection closes, its sessions go (the broker then releases their members' records).

Pure: no I/O, no clock. A share partition is named here by (topic id, partition index).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from kcoord.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

SessionPartition = tuple[uuid.UUID, int]
"""A share partition of a session: (topic id, partition index)."""


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (wrapping past the largest int32 to 1, never to 0 or -1)."""
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class ShareSessionError(Exception):
    """A share session refusal: Kafka error ``code`` for the whole request."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class ShareSession:
    """One member's session: the epoch its next request must carry, its partitions in the
    order they were added, and the connection (any hashable token) it belongs to."""

    group_id: str
    member_id: str
    epoch: int
    owner: Hashable
    partitions: dict[SessionPartition, None] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.group_id, self.member_id


@dataclass(frozen=True, slots=True)
class SessionUse:
    """What one ShareFetch may do in its session: ``final`` (epoch -1: acknowledge, fetch
    nothing, then close) and the partitions to fetch from (none when final)."""

    session: ShareSession
    final: bool

    def fetch_partitions(self) -> list[SessionPartition]:
        return [] if self.final else list(self.session.partitions)


class ShareSessionCache:
    """Every share session of the broker (module docstring)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[ShareSession]:
        return iter(list(self._sessions.values()))

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def for_fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        named: Iterable[SessionPartition],
        forgotten: Iterable[SessionPartition],
        has_acknowledgements: bool,
        owner: Hashable,
    ) -> SessionUse:
        """The session a ShareFetch of ``epoch`` works in, opened or moved on by it: the
        partitions it ``named`` join the session, the ``forgotten`` ones leave it. Raises
        :class:`ShareSessionError`; nothing changes then."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            session = self._sessions.get(key)
            if session is None:
                raise ShareSessionError(
                    ErrorCode.share_session_not_found, "no share session to close"
                )
            return SessionUse(session, final=True)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                raise ShareSessionError(
                    ErrorCode.invalid_request,
                    "a ShareFetch opening a share session cannot carry acknowledgements",
                )
            replaced = self._sessions.pop(key, None)
            if len(self._sessions) >= self.max_sessions:
                if replaced is not None:
                    self._sessions[key] = replaced
                raise ShareSessionError(
                    ErrorCode.share_session_limit_reached,
                    f"the broker holds {self.max_sessions} share sessions"
                    " (group.share.max.share.sessions)",
                )
            session = ShareSession(group_id, member_id, next_epoch(INITIAL_EPOCH), owner)
            session.partitions.update(dict.fromkeys(named))
            self._sessions[key] = session
            return SessionUse(session, final=False)
        session = self._expect(key, epoch)
        session.partitions.update(dict.fromkeys(named))
        for tp in forgotten:
            session.partitions.pop(tp, None)
        session.epoch = next_epoch(epoch)
        return SessionUse(session, final=False)

    def for_acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionUse:
        """The session a ShareAcknowledge of ``epoch`` works in (moved on by it unless final).
        Raises :class:`ShareSessionError`."""
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(
                ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session"
            )
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            session = self._sessions.get(key)
            if session is None:
                raise ShareSessionError(
                    ErrorCode.share_session_not_found, "no share session to close"
                )
            return SessionUse(session, final=True)
        session = self._expect(key, epoch)
        session.epoch = next_epoch(epoch)
        return SessionUse(session, final=False)

    def _expect(self, key: tuple[str, str], epoch: int) -> ShareSession:
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionError(
                ErrorCode.share_session_not_found,
                f"no share session for member {key[1]!r} of group {key[0]!r}",
            )
        if session.epoch != epoch:
            raise ShareSessionError(
                ErrorCode.invalid_share_session_epoch,
                f"share session epoch {epoch}, expected {session.epoch}",
            )
        return session

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        """Forget the member's session (final request, member gone); it, if there was one."""
        return self._sessions.pop((group_id, member_id), None)

    def connection_closed(self, owner: Hashable) -> list[ShareSession]:
        """Forget the sessions of a closed connection; them."""
        gone = [s for s in self._sessions.values() if s.owner == owner]
        for session in gone:
            del self._sessions[session.key]
        return gone

    def forget_topics(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Drop deleted topics' partitions from every session."""
        ids = set(topic_ids)
        for session in self._sessions.values():
            for tp in [tp for tp in session.partitions if tp[0] in ids]:
                del session.partitions[tp]
