"""The share-group (KIP-932) admin calls of the commands, which confluent-kafka's AdminClient
does not make: each is one Kafka request on a connection of its own (secured as the
``--command-config`` says), encoded and decoded with ``protocol/``'s codecs.

- :func:`list_share_groups`: ListGroups v5 filtered on the ``share`` type, to every broker.
- :func:`describe_share_group`: FindCoordinator, then ShareGroupDescribe v1 to the group's
  coordinator (None when the id is no share group).
- :func:`share_offsets`, :func:`alter_share_offsets`, :func:`delete_share_offsets`:
  DescribeShareGroupOffsets v1, AlterShareGroupOffsets v0 and DeleteShareGroupOffsets v0 to the
  group's coordinator; a group-level error is an :class:`AdminError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .client import Admin, AdminError, _wire_request

SHARE_TYPE = "share"


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    client_id: str
    host: str
    member_epoch: int
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ShareGroup:
    group_id: str
    state: str
    coordinator: tuple[int, str, int]  # id, host, port
    group_epoch: int
    assignment_epoch: int
    members: tuple[ShareMember, ...]


@dataclass(frozen=True, slots=True)
class ShareOffset:
    start_offset: int
    """The share-partition start offset; -1 when the share coordinator holds none."""
    leader_epoch: int
    lag: int
    """KIP-1226's lag; -1 when unknown."""
    error: str | None = None


def _error_name(code: int) -> str:
    from kcoord.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


def _reason(code: int, message: str | None) -> str:
    return f"{_error_name(code)}: {message}" if message else _error_name(code)


def _refused(doing: str, code: int, message: str | None) -> AdminError:
    return AdminError(f"{doing}: {_reason(code, message)}")


def _call(admin: Admin, where: tuple[str, int], api_key: int, version: int, **fields: Any) -> Any:
    return _wire_request(
        where[0], where[1], admin.timeout, api_key, version, security=admin.security, **fields
    )


def _bootstrap(admin: Admin) -> tuple[str, int]:
    first = admin.bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--bootstrap-server {admin.bootstrap!r}: expected host:port")
    return host.strip("[]"), int(port)


def coordinator_of(admin: Admin, group_id: str) -> tuple[int, str, int]:
    """The group's coordinator (FindCoordinator v4 to the bootstrap broker)."""
    from kcoord.protocol.apis import ApiKey

    r = _call(
        admin,
        _bootstrap(admin),
        ApiKey.FIND_COORDINATOR,
        4,
        key_type=0,
        coordinator_keys=[group_id],
    )
    c = r.coordinators[0]
    if c.error_code:
        raise _refused(
            f"finding the coordinator of group {group_id!r}", c.error_code, c.error_message
        )
    return int(c.node_id), c.host, int(c.port)


def list_share_groups(admin: Admin) -> dict[str, str]:
    """Every share group's id and state (ListGroups v5 to each broker of the cluster)."""
    from kcoord.protocol.apis import ApiKey

    cluster = admin.wait(
        admin.client.describe_cluster(request_timeout=admin.timeout), "describing the cluster"
    )
    out: dict[str, str] = {}
    for node in cluster.nodes:
        r = _call(
            admin,
            (node.host, node.port),
            ApiKey.LIST_GROUPS,
            5,
            states_filter=[],
            types_filter=[SHARE_TYPE],
        )
        if r.error_code:
            raise AdminError(f"listing groups on broker {node.id}: {_error_name(r.error_code)}")
        out.update((g.group_id, g.group_state) for g in r.groups)
    return out


def describe_share_group(admin: Admin, group_id: str) -> ShareGroup | None:
    """The share group ``group_id``; None if there is none (no group, or one of another type).
    AdminError if the broker cannot say."""
    from kcoord.protocol.apis import ApiKey
    from kcoord.protocol.errors import ErrorCode

    coordinator = coordinator_of(admin, group_id)
    r = _call(
        admin,
        coordinator[1:],
        ApiKey.SHARE_GROUP_DESCRIBE,
        1,
        group_ids=[group_id],
        include_authorized_operations=False,
    )
    d = r.groups[0]
    if d.error_code == ErrorCode.group_id_not_found:
        return None
    if d.error_code:
        raise _refused(f"describing share group {group_id!r}", d.error_code, d.error_message)
    members = tuple(
        ShareMember(
            m.member_id,
            m.client_id,
            m.client_host,
            int(m.member_epoch),
            tuple(
                sorted(
                    (t.topic_name, int(p))
                    for t in m.assignment.topic_partitions
                    for p in t.partitions
                )
            ),
        )
        for m in d.members
    )
    return ShareGroup(
        group_id, d.group_state, coordinator, int(d.group_epoch), int(d.assignment_epoch), members
    )


def share_offsets(
    admin: Admin, group: ShareGroup | str, topics: Mapping[str, Iterable[int]] | None = None
) -> dict[tuple[str, int], ShareOffset]:
    """The start offset and lag of each partition of the group (``topics`` None: every
    partition with share state; else these topics' partitions)."""
    from kcoord.protocol.apis import ApiKey

    group_id, where = _where(admin, group)
    wanted = (
        None
        if topics is None
        else [dict(topic_name=t, partitions=sorted(ps)) for t, ps in sorted(topics.items())]
    )
    r = _call(
        admin,
        where,
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        1,
        groups=[dict(group_id=group_id, topics=wanted)],
    )
    g = r.groups[0]
    if g.error_code:
        raise _refused(
            f"describing the offsets of share group {group_id!r}", g.error_code, g.error_message
        )
    return {
        (t.topic_name, int(p.partition_index)): ShareOffset(
            int(p.start_offset),
            int(p.leader_epoch),
            int(p.lag),
            _reason(p.error_code, p.error_message) if p.error_code else None,
        )
        for t in g.topics
        for p in t.partitions
    }


def alter_share_offsets(
    admin: Admin, group_id: str, offsets: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], str | None]:
    """AlterShareGroupOffsets: each partition's error (None: set)."""
    from kcoord.protocol.apis import ApiKey

    by_topic: dict[str, list[dict[str, int]]] = {}
    for (t, p), o in sorted(offsets.items()):
        by_topic.setdefault(t, []).append(dict(partition_index=p, start_offset=o))
    _, where = _where(admin, group_id)
    r = _call(
        admin,
        where,
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        0,
        group_id=group_id,
        topics=[dict(topic_name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    if r.error_code:
        raise _refused(
            f"altering the offsets of share group {group_id!r}", r.error_code, r.error_message
        )
    return {
        (t.topic_name, int(p.partition_index)): _reason(p.error_code, p.error_message)
        if p.error_code
        else None
        for t in r.responses
        for p in t.partitions
    }


def delete_share_offsets(
    admin: Admin, group_id: str, topics: Iterable[str]
) -> dict[str, str | None]:
    """DeleteShareGroupOffsets: each topic's error (None: deleted)."""
    from kcoord.protocol.apis import ApiKey

    _, where = _where(admin, group_id)
    r = _call(
        admin,
        where,
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        0,
        group_id=group_id,
        topics=[dict(topic_name=t) for t in topics],
    )
    if r.error_code:
        raise _refused(
            f"deleting the offsets of share group {group_id!r}", r.error_code, r.error_message
        )
    return {
        t.topic_name: _reason(t.error_code, t.error_message) if t.error_code else None
        for t in r.responses
    }


def _where(admin: Admin, group: ShareGroup | str) -> tuple[str, tuple[str, int]]:
    if isinstance(group, ShareGroup):
        return group.group_id, group.coordinator[1:]
    return group, coordinator_of(admin, group)[1:]
