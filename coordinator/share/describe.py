"""What the admin APIs show of share groups: ShareGroupDescribe's answer and the share groups'
lines of ListGroups."""

from __future__ import annotations

from collections.abc import Iterable

from kcoord.coordinator.consumer.topics import TopicsView
from kcoord.coordinator.messages import ListedGroup, ListGroupsRequest
from kcoord.coordinator.share.group import Assignment, ShareGroup
from kcoord.coordinator.share.messages import (
    DescribedShareGroup,
    DescribedShareMember,
    DescribedSharePartitions,
)
from kcoord.protocol.errors import ErrorCode

GROUP_TYPE_SHARE = "share"
SHARE_PROTOCOL_TYPE = "share"
ASSIGNOR_NAME = "simple"


def _partitions(assignment: Assignment, topics: TopicsView) -> tuple[DescribedSharePartitions, ...]:
    out = []
    for topic_id, partitions in assignment.items():
        info = topics.topic_by_id(topic_id)
        out.append(DescribedSharePartitions(topic_id, info.name if info else "", tuple(sorted(partitions))))
    return tuple(sorted(out, key=lambda d: (d.topic_name, d.topic_id.bytes)))


def describe_share_group(group: ShareGroup, topics: TopicsView) -> DescribedShareGroup:
    members = tuple(
        DescribedShareMember(
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            assignment=_partitions(m.assigned, topics),
        )
        for m in group.members.values()
    )
    return DescribedShareGroup(
        ErrorCode.none,
        None,
        group.group_id,
        group.state,
        group.group_epoch,
        group.assignment_epoch,
        ASSIGNOR_NAME,
        members,
    )


def not_a_share_group(group_id: str, error: int | None, other_type: bool) -> DescribedShareGroup:
    """ShareGroupDescribe's entry for a group it does not describe: ``error`` from the routing
    checks, else GROUP_ID_NOT_FOUND (a group of another type, or none)."""
    if error is not None:
        return DescribedShareGroup(error, None, group_id)
    what = "is not a share group" if other_type else "not found"
    return DescribedShareGroup(ErrorCode.group_id_not_found, f"Group {group_id} {what}.", group_id)


def listed_share_groups(groups: Iterable[ShareGroup], req: ListGroupsRequest) -> tuple[ListedGroup, ...]:
    """ListGroups' lines for the share groups that pass the state and type filters."""
    states = {s.lower() for s in req.states_filter}
    types = {t.lower() for t in req.types_filter}
    if types and GROUP_TYPE_SHARE not in types:
        return ()
    return tuple(
        ListedGroup(g.group_id, SHARE_PROTOCOL_TYPE, g.state, GROUP_TYPE_SHARE)
        for g in groups
        if not states or g.state.lower() in states
    )
