"""The steady ConsumerGroupHeartbeat: what most heartbeats of a settled group are, answered on
the spot.

A heartbeat that changes nothing (same member, same epoch, every optional field null, the same
client id and host, the group settled at its target) only pushes the member's session deadline
out and answers the same epoch with no assignment. :func:`steady_heartbeat` recognises that case
without building the request object, the group change, or the operation's output; for anything
else it returns None and touches nothing, and the heartbeat takes the full path
(:meth:`coordinator.consumer.manager.ConsumerGroupManager.heartbeat`), which gives the same
answer to a steady heartbeat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kcoord.coordinator.consumer.manager import ConsumerGroupManager


def steady_heartbeat(
    consumer: ConsumerGroupManager,
    group_id: str,
    member_id: str,
    member_epoch: int,
    client_id: str,
    client_host: str,
    now_ms: int,
) -> int | None:
    """For a steady heartbeat of ``member_id`` at ``member_epoch``: re-arm its session and
    return the heartbeat interval to answer (no error, the same epoch, no assignment). None,
    nothing done, when the heartbeat is not a steady one."""
    if member_epoch <= 0:
        return None
    group = consumer.groups.get(group_id)
    if group is None or group.rebalance is not None:
        return None
    member = group.members.get(member_id)
    if (
        member is None
        or member.member_epoch != member_epoch
        or member.client_id != client_id
        or member.client_host != client_host
        or group.group_epoch != group.assignment_epoch
        or group.topics_version != consumer.topics.version
        or not member.is_reconciled_to(group.assignment_epoch)
    ):
        return None
    consumer.arm_session(group, member, now_ms)
    return consumer.heartbeat_interval_ms(group_id)
