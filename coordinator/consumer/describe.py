"""What the admin APIs show of consumer groups: ConsumerGroupDescribe's answer and the
consumer groups' lines of ListGroups."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.consumer.member import Assignment
from kcoord.coordinator.consumer.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedPartitions,
)
from kcoord.coordinator.consumer.target import preferred_assignor
from kcoord.coordinator.consumer.topics import TopicsView
from kcoord.coordinator.messages import DescribedGroup, ListedGroup, ListGroupsRequest
from kcoord.coordinator.subscription import CONSUMER_PROTOCOL_TYPE
from kcoord.protocol.errors import ErrorCode

GROUP_TYPE_CONSUMER = "consumer"


def _partitions(assignment: Assignment, topics: TopicsView) -> tuple[DescribedPartitions, ...]:
    out = []
    for topic_id, partitions in assignment.items():
        info = topics.topic_by_id(topic_id)
        out.append(DescribedPartitions(topic_id, info.name if info else "", tuple(sorted(partitions))))
    return tuple(sorted(out, key=lambda d: (d.topic_name, d.topic_id.bytes)))


def describe_group(group: ConsumerGroup, topics: TopicsView, default_assignor: str) -> DescribedConsumerGroup:
    members = tuple(
        DescribedConsumerMember(
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=_partitions(m.assigned, topics),
            target_assignment=_partitions(group.target_of(m.member_id), topics),
            member_type=0 if m.classic is not None else 1,
        )
        for m in group.members.values()
    )
    return DescribedConsumerGroup(
        ErrorCode.none,
        None,
        group.group_id,
        group.state,
        group.group_epoch,
        group.assignment_epoch,
        preferred_assignor(group, default_assignor).name,
        members,
    )


def listed_consumer_groups(
    groups: Iterable[ConsumerGroup], req: ListGroupsRequest
) -> tuple[ListedGroup, ...]:
    """ListGroups' lines for consumer groups that pass the state and type filters."""
    states = {s.lower() for s in req.states_filter}
    types = {t.lower() for t in req.types_filter}
    if types and GROUP_TYPE_CONSUMER not in types:
        return ()
    out = []
    for group in groups:
        state = group.state
        if not states or state.lower() in states:
            out.append(ListedGroup(group.group_id, CONSUMER_PROTOCOL_TYPE, state, GROUP_TYPE_CONSUMER))
    return tuple(out)


def not_a_consumer_group(group_id: str, error: int | None, is_classic: bool) -> DescribedConsumerGroup:
    """ConsumerGroupDescribe's entry for a group it does not describe: ``error`` from the
    routing checks, else GROUP_ID_NOT_FOUND (a classic group, or none)."""
    if error is not None:
        return DescribedConsumerGroup(error, None, group_id)
    what = "is not a consumer group" if is_classic else "not found"
    return DescribedConsumerGroup(ErrorCode.group_id_not_found, f"Group {group_id} {what}.", group_id)


def not_a_classic_group(group_id: str) -> DescribedGroup:
    """DescribeGroups' entry for a consumer group (v6 reports it; older versions show Dead)."""
    return DescribedGroup(
        ErrorCode.group_id_not_found, group_id, "Dead", "", "", (), f"Group {group_id} is not a classic group."
    )


def consumer_group_describe(
    consumer: ConsumerGroupManager,
    gate: Callable[..., int | None],
    other_type: Callable[[str], bool],
    default_assignor: str,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse:
    """ConsumerGroupDescribe in a shard: ``gate`` is its routing check, ``other_type`` whether
    an id is a group of another type; an unknown group, or one of another type, is
    GROUP_ID_NOT_FOUND."""
    described = []
    for group_id in req.group_ids:
        error = gate(group_id, empty_id_ok=False)
        group = consumer.get(group_id) if error is None else None
        if group is not None:
            described.append(describe_group(group, consumer.topics, default_assignor))
        else:
            described.append(not_a_consumer_group(group_id, error, other_type(group_id)))
    return ConsumerGroupDescribeResponse(tuple(described))
