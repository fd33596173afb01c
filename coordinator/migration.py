"""Online migration between the group types (KIP-848), under
``group.consumer.migration.policy``.

Upgrade: the first ConsumerGroupHeartbeat (epoch 0) for a classic group whose members use the
``consumer`` embedded protocol turns it into a consumer group: requests parked in the classic
group are answered REBALANCE_IN_PROGRESS, the classic record gets a tombstone, and every classic
member becomes a member of the consumer group at the classic generation, keeping its current
assignment (records 5…, 3, 7…, 6, 8…); the heartbeat then joins it like any member.

Downgrade: when the last consumer-protocol member of a consumer group leaves (or is fenced) and
only classic members remain, the group becomes a classic group again at its group epoch, with
their current assignments, its consumer records tombstoned and a classic record written; it
then rebalances so that the members rejoin as a classic group.

Empty groups convert either way without this module (the shard drops the empty group).
"""

from __future__ import annotations

import logging

from kcoord.coordinator.classic.group import ClassicGroup
from kcoord.coordinator.classic.manager import ClassicGroupManager
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer import persistence as records
from kcoord.coordinator.consumer.embedded import (
    SubscriptionError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    version_of,
)
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.consumer.member import ConsumerMember, MemberState
from kcoord.coordinator.consumer.records import ClassicMemberMetadata, ClassicProtocol
from kcoord.coordinator.consumer.topics import by_id, by_name
from kcoord.coordinator.output import Operation
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    encode_key,
)
from kcoord.coordinator.subscription import CONSUMER_PROTOCOL_TYPE
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

UPGRADE_POLICIES = frozenset({"bidirectional", "upgrade"})
DOWNGRADE_POLICIES = frozenset({"bidirectional", "downgrade"})


class GroupMigration:
    def __init__(
        self,
        config: GroupConfig,
        op: Operation,
        classic: ClassicGroupManager,
        consumer: ConsumerGroupManager,
    ) -> None:
        self._config = config
        self._op = op
        self._classic = classic
        self._consumer = consumer
        consumer.downgrade = self.downgrade

    # ---- classic -> consumer ------------------------------------------------------------------

    def upgrade(self, group: ClassicGroup, now_ms: int) -> bool:
        """Convert a classic group with members to a consumer group; False (nothing changed)
        when the policy, its protocol type or its size does not allow it."""
        gid = group.group_id
        if self._config.consumer_migration_policy not in UPGRADE_POLICIES:
            log.info("group %s: not upgraded to a consumer group: the migration policy forbids it", gid)
            return False
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE or len(group.members) > self._config.consumer_max_size:
            return False
        topics = self._consumer.topics
        converted = ConsumerGroup(gid, group_epoch=group.generation, assignment_epoch=group.generation)
        try:
            for m in group.members.values():
                metadata = (
                    m.metadata(group.protocol_name)
                    if group.protocol_name is not None
                    else m.protocols[0][1]
                )
                subscription = decode_subscription(metadata)
                assigned = by_id(decode_assignment(m.assignment), topics)
                member = ConsumerMember(
                    member_id=m.member_id,
                    instance_id=m.group_instance_id,
                    rack_id=subscription.rack_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    member_epoch=group.generation,
                    previous_member_epoch=group.generation,
                    state=MemberState.STABLE,
                    assigned=assigned,
                    # KIP-1251: what it holds counts as assigned at its generation.
                    assignment_epochs={
                        t: dict.fromkeys(ps, max(group.generation, 0)) for t, ps in assigned.items()
                    },
                    classic=ClassicMemberMetadata(
                        m.session_timeout_ms,
                        tuple(ClassicProtocol(name, bytes(meta)) for name, meta in m.protocols),
                    ),
                )
                converted.put_member(member)
                converted.target[m.member_id] = assigned
        except SubscriptionError as e:
            log.warning("group %s: not upgraded to a consumer group: %s", gid, e)
            return False
        # Parked JoinGroup/SyncGroup requests are told to rejoin; the classic group goes.
        self._classic.state.discard(group, ErrorCode.rebalance_in_progress)
        emit = self._op.emit
        emit(encode_key(GroupMetadataKey(gid)), None)
        members = list(converted.members.values())
        for member in members:
            emit(*records.member_record(gid, member))
        emit(*records.epoch_record(converted))
        for member in members:
            emit(*records.target_record(gid, member.member_id, converted.target[member.member_id]))
        emit(*records.assignment_epoch_record(converted))
        for member in members:
            emit(*records.current_assignment_record(gid, member))
        self._consumer.groups[gid] = converted
        for member in members:
            self._consumer.arm_session(converted, member, now_ms)
        log.info(
            "group %s: upgraded from classic to consumer group at epoch %d (%d classic members)",
            gid,
            converted.group_epoch,
            len(members),
        )
        return True

    # ---- consumer -> classic ------------------------------------------------------------------

    def downgrade(self, group: ConsumerGroup, leaving: ConsumerMember, now_ms: int) -> bool:
        """Convert a consumer group whose last consumer-protocol member ``leaving`` goes to a
        classic group (see the module docstring); False when the policy or the classic
        group size forbids it."""
        gid = group.group_id
        remaining = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if self._config.consumer_migration_policy not in DOWNGRADE_POLICIES:
            return False
        if len(remaining) > self._config.max_size:
            return False
        protocol = _common_protocol(remaining)
        topics = self._consumer.topics
        members = []
        for m in remaining:
            classic = m.classic
            assert classic is not None
            chosen = next(
                (p for p in classic.supported_protocols if p.name == protocol),
                classic.supported_protocols[0],
            )
            names = by_name(m.assigned, topics)
            members.append(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=classic.session_timeout_ms,
                    subscription=chosen.metadata,
                    assignment=encode_assignment(names, version_of(chosen.metadata)),
                )
            )
        for record in records.group_tombstones(group):
            self._op.emit(*record)
        del self._consumer.groups[gid]
        group.dead = True
        value = GroupMetadataValue(
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            generation=group.group_epoch,
            protocol=protocol,
            leader=members[0].member_id,
            current_state_timestamp=now_ms,
            members=tuple(members),
        )
        reason = f"downgraded from a consumer group: member {leaving.member_id} left"
        self._classic.adopt(gid, value, now_ms, reason)
        log.info(
            "group %s: downgraded from consumer to classic group at generation %d (%d members)",
            gid,
            group.group_epoch,
            len(members),
        )
        return True


def _common_protocol(members: list[ConsumerMember]) -> str:
    """The first protocol of the first member that every member supports (else its first)."""
    first = members[0].classic
    assert first is not None
    for candidate in first.supported_protocols:
        if all(
            m.classic is not None and any(p.name == candidate.name for p in m.classic.supported_protocols)
            for m in members
        ):
            return candidate.name
    return first.supported_protocols[0].name
