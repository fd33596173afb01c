"""The console's actions on a group: reset its offsets (a dry run first), delete it, delete its
offsets of a topic. Each goes through the coordinator's own path for the Kafka API it stands for,
and asks the authorizer what that API asks:

- reset: OffsetCommit as an admin client sends it (no member, generation -1), which needs READ
  on the group and READ on every topic; only for a group without members (Empty, or unknown:
  Dead), as ``kafka-consumer-groups.sh --reset-offsets`` requires. The new offsets are those of
  earliest (the log start), latest (the high watermark), an offset (kept within the log) or a
  time (the first record at or after it; the log end if none), for every partition the group
  has an offset on, or every partition of one topic;
- delete: DeleteGroups, DELETE on the group; the coordinator refuses a group with members
  (NON_EMPTY_GROUP);
- delete offsets: OffsetDelete, DELETE on the group and READ on the topic; the coordinator
  refuses a topic the group still consumes (GROUP_SUBSCRIBED_TO_TOPIC).

Without an authorizer (no login) everything is allowed. Share groups are not handled here
(their offsets are the share coordinator's). Every action done or refused is logged on
``kcoord.console`` with who asked for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord.coordinator import messages as m
from kcoord.coordinator.classic.group import ClassicGroup
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.protocol.errors import ErrorCode

from ..data.log_read import high_watermark
from ..security.acl.model import Operation, ResourceType
from .messages import offset_at_time

if TYPE_CHECKING:
    from .login import Viewer
    from .views import ConsoleState

log = logging.getLogger("kcoord.console")

RESET_TO = ("earliest", "latest", "offset", "timestamp")
INACTIVE = frozenset({"Empty", "Dead"})


class Refused(Exception):
    """An action not done: its HTTP status (403 not allowed, 404 unknown, 409 not now) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Who:
    """Who asks: the principal (None without a login) and from where."""

    viewer: Viewer | None
    host: str

    @property
    def name(self) -> str:
        return self.viewer.principal if self.viewer is not None else "(no login)"

    def may(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        return self.viewer is None or self.viewer.may(op, rtype, name)

    def require(self, op: Operation, rtype: ResourceType, name: str, action: str) -> None:
        if not self.may(op, rtype, name):
            log.warning("console: %s from %s refused: %s (no %s on %s %s)",
                        self.name, self.host, action, op.name, rtype.name, name)  # fmt: skip
            raise Refused(403, f"{self.name} may not {op.name} {rtype.name.lower()} {name!r}")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def _group(state: ConsoleState, group_id: str, who: Who) -> tuple[Any, ClassicGroup | ConsumerGroup | None]:
    """(shard, group or None if it has only offsets); 404 for a group the viewer may not see."""
    if who.viewer is not None and not who.viewer.group(group_id):
        raise Refused(404, f"no group {group_id!r}")
    runtime = state.runtime
    shard = runtime.shards[runtime.partition_of(group_id)].shard
    if shard.share_group(group_id) is not None:
        raise Refused(409, "share groups' offsets are not reset or deleted from the console")
    group = shard.consumer_group(group_id) or shard.group(group_id)
    if group is None and not shard.committed_offsets(group_id):
        raise Refused(404, f"no group {group_id!r}")
    return shard, group


def _state_of(group: ClassicGroup | ConsumerGroup | None) -> str:
    if group is None:
        return "Dead"
    return group.state if isinstance(group, ConsumerGroup) else group.state.value


def plan_reset(
    state: ConsoleState, group_id: str, spec: dict[str, Any], who: Who
) -> list[dict[str, Any]]:
    """The reset's partitions with their current and new offsets (nothing is changed)."""
    to = spec.get("to")
    if to not in RESET_TO:
        raise Refused(400, f"'to' must be one of {', '.join(RESET_TO)}")
    value = spec.get(to) if to in ("offset", "timestamp") else 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Refused(400, f"{to!r} needs a non-negative integer {to!r}")
    topic = spec.get("topic")
    if topic is not None and not isinstance(topic, str):
        raise Refused(400, "'topic' must be a topic name")
    shard, group = _group(state, group_id, who)
    who.require(Operation.READ, ResourceType.GROUP, group_id, "reset offsets")
    group_state = _state_of(group)
    if group_state not in INACTIVE or (group is not None and group.members):
        raise Refused(409, f"offsets can only be reset while the group has no members; it is "
                           f"{group_state} with {len(group.members) if group else 0} member(s)")  # fmt: skip
    committed = shard.committed_offsets(group_id)
    if topic is not None:
        found = state.topics.get(topic)
        if found is None:
            raise Refused(404, f"no topic {topic!r}")
        partitions = [(topic, p) for p in range(len(found.partitions))]
    else:
        partitions = sorted(committed)
    if not partitions:
        raise Refused(409, "the group has no offset to reset; name a topic")
    for name in sorted({t for t, _ in partitions}):
        who.require(Operation.READ, ResourceType.TOPIC, name, "reset offsets")
    plan = []
    for t, p in partitions:
        plog = state.topics.partition(t, p)
        if plog is None:
            continue
        start, end = plog.log_start_offset, high_watermark(plog)
        if to == "earliest":
            new = start
        elif to == "latest":
            new = end
        elif to == "offset":
            new = min(max(value, start), end)
        else:
            new = offset_at_time(plog, value, end)
        current = committed.get((t, p))
        plan.append({"topic": t, "partition": p, "current": current.offset if current else None,
                     "new": new, "log_start": start, "log_end": end})  # fmt: skip
    return plan


async def reset_offsets(
    state: ConsoleState, group_id: str, spec: dict[str, Any], who: Who
) -> dict[str, Any]:
    """The reset's plan; committed (OffsetCommit as an admin) when ``spec["execute"]``."""
    plan = plan_reset(state, group_id, spec, who)
    execute = spec.get("execute") is True
    if not execute:
        return {"group": group_id, "executed": False, "offsets": plan}
    by_topic: dict[str, list[m.OffsetCommitPartition]] = {}
    for row in plan:
        by_topic.setdefault(row["topic"], []).append(
            m.OffsetCommitPartition(row["partition"], row["new"], -1, "")
        )
    request = m.OffsetCommitRequest(
        group_id=group_id, generation_id=-1, member_id="", group_instance_id=None,
        topics=tuple((t, tuple(parts)) for t, parts in by_topic.items()),
    )  # fmt: skip
    runtime = state.runtime
    p = runtime.partition_of(group_id)
    answer: m.OffsetCommitResponse = await runtime.call(p, runtime.shard(p).offset_commit, request)
    errors = {(t, part): code for t, results in answer.topics for part, code in results}
    for row in plan:
        row["error"] = _error_name(errors.get((row["topic"], row["partition"]), 0))
    failed = [r for r in plan if r["error"] != "NONE"]
    log.info("console: %s from %s reset the offsets of group %s (%s): %s", who.name, who.host,
             group_id, spec.get("to"), ", ".join(f"{r['topic']}-{r['partition']}={r['new']}"
                                                 f"{'' if r['error'] == 'NONE' else ' ' + r['error']}"
                                                 for r in plan))  # fmt: skip
    return {"group": group_id, "executed": not failed, "offsets": plan}


async def delete_group(state: ConsoleState, group_id: str, who: Who) -> dict[str, Any]:
    """DeleteGroups of one group."""
    _group(state, group_id, who)
    who.require(Operation.DELETE, ResourceType.GROUP, group_id, "delete group")
    runtime = state.runtime
    p = runtime.partition_of(group_id)
    answer: m.DeleteGroupsResponse = await runtime.call(
        p, runtime.shard(p).delete_groups, m.DeleteGroupsRequest((group_id,))
    )
    code = next((r.error for r in answer.results if r.group_id == group_id), 0)
    log.info("console: %s from %s deleted group %s: %s", who.name, who.host, group_id, _error_name(code))
    if code:
        raise Refused(409, f"group {group_id!r} not deleted: {_error_name(code)}")
    state.lag_history.forget(group_id)
    return {"group": group_id, "deleted": True}


async def delete_offsets(
    state: ConsoleState, group_id: str, topic: Any, who: Who
) -> dict[str, Any]:
    """OffsetDelete of the group's offsets on every partition of ``topic``."""
    if not isinstance(topic, str) or not topic:
        raise Refused(400, "'topic' must be a topic name")
    shard, _ = _group(state, group_id, who)
    who.require(Operation.DELETE, ResourceType.GROUP, group_id, "delete offsets")
    who.require(Operation.READ, ResourceType.TOPIC, topic, "delete offsets")
    partitions = tuple(sorted(p for t, p in shard.committed_offsets(group_id) if t == topic))
    if not partitions:
        raise Refused(404, f"group {group_id!r} has no offset on topic {topic!r}")
    runtime = state.runtime
    p = runtime.partition_of(group_id)
    answer: m.OffsetDeleteResponse = await runtime.call(
        p, runtime.shard(p).offset_delete, m.OffsetDeleteRequest(group_id, ((topic, partitions),))
    )
    codes = [code for _, results in answer.topics for _, code in results]
    first = answer.error or next((c for c in codes if c), 0)
    log.info("console: %s from %s deleted the offsets of group %s on %s: %s",
             who.name, who.host, group_id, topic, _error_name(first))  # fmt: skip
    if first:
        raise Refused(409, f"offsets not deleted: {_error_name(first)}")
    return {"group": group_id, "topic": topic, "partitions": list(partitions), "deleted": True}
