"""JoinGroup and SyncGroup between the wire and the coordinator, on both paths.

The generic path (broker/groups/api.py: a kio request, the ACL check) and the direct one (no
authorizer: the frame read by hand, protocol/group_codec.py) make the same coordinator messages
here, and answer with the same bodies written by hand. The direct path hands the connection the
whole response frame when the shard answered at once (MEMBER_ID_REQUIRED, errors), else the
shard's own future with the function that writes its answer (a parked join, a sync awaiting its
record's fsync): no second future, no task, no kio entity either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kcoord.coordinator import messages as m
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import RawBody, encode_response
from kcoord.protocol.framing import Frame
from kcoord.protocol.group_codec import (
    JoinGroupFields,
    SyncGroupFields,
    decode_join_group,
    decode_sync_group,
    join_group_body,
    sync_group_body,
)

from ..net.connection import Deferred, DirectHandler
from .runtime import GroupRuntime


def join_request(fields: JoinGroupFields, client_host: str, version: int) -> m.JoinGroupRequest:
    """The coordinator's JoinGroup of ``fields`` (as group_codec reads them) from ``client_host``
    (the client's address as Kafka reports it: "/127.0.0.1")."""
    client_id, group_id, session_ms, rebalance_ms, member_id, instance_id, protocol_type, protocols, reason = fields
    return m.JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=instance_id,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=protocol_type,
        protocols=protocols,
        client_id=client_id,
        client_host=client_host,
        require_known_member_id=version >= 4,
        reason=reason,
        supports_skip_assignment=version >= 9,
    )


def join_answer(version: int, r: m.JoinGroupResponse) -> RawBody:
    return RawBody(
        join_group_body(
            version, r.error, r.generation_id, r.protocol_type, r.protocol_name, r.leader,
            r.skip_assignment, r.member_id,
            [(x.member_id, x.group_instance_id, x.metadata) for x in r.members],
        )
    )


def sync_request(fields: SyncGroupFields) -> m.SyncGroupRequest:
    return m.SyncGroupRequest(*fields)


def sync_answer(version: int, r: m.SyncGroupResponse) -> RawBody:
    return RawBody(sync_group_body(version, r.error, r.protocol_type, r.protocol_name, r.assignment))


class JoinSyncDirect:
    """The direct handlers of JoinGroup and SyncGroup (installed without an authorizer)."""

    def __init__(self, runtime: GroupRuntime, max_elements: int) -> None:
        self.runtime = runtime
        self._max_elements = max_elements

    def handlers(self) -> dict[int, DirectHandler]:
        return {ApiKey.JOIN_GROUP: self.join_group_direct, ApiKey.SYNC_GROUP: self.sync_group_direct}

    def join_group_direct(
        self, frame: Frame, version: int, correlation_id: int, client_host: str
    ) -> bytes | Deferred | None:
        fields = decode_join_group(frame, version, self._max_elements)
        if fields is None:
            return None
        runtime = self.runtime
        p = runtime.partition_of(fields[1])
        request = join_request(fields, "/" + client_host, version)
        return _answered(
            runtime.submit(p, runtime.shard(p).join_group, request),
            lambda r: encode_response(correlation_id, join_answer(version, r), version >= 6),
        )

    def sync_group_direct(
        self, frame: Frame, version: int, correlation_id: int, client_host: str
    ) -> bytes | Deferred | None:
        fields = decode_sync_group(frame, version, self._max_elements)
        if fields is None:
            return None
        runtime = self.runtime
        p = runtime.partition_of(fields[0])
        return _answered(
            runtime.submit(p, runtime.shard(p).sync_group, sync_request(fields)),
            lambda r: encode_response(correlation_id, sync_answer(version, r), version >= 4),
        )


def _answered(result: Any, encode: Callable[[Any], bytes]) -> bytes | Deferred:
    """The response frame now if the shard answered at once, else its future and ``encode``."""
    if isinstance(result, asyncio.Future):
        return (result, encode)
    return encode(result)
