"""DescribeProducers (API 61, KIP-664): the producers each asked-for partition holds state for,
with their epoch, last sequence and timestamp, coordinator epoch and the start offset of their
open transaction (``kafka-transactions.sh describe-producers``, ``Admin.describeProducers``:
how to find the producer behind a hanging transaction).

READ on the topic is checked as Kafka checks it (TOPIC_AUTHORIZATION_FAILED per partition).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode

from ..net.connection import RequestContext
from ..security.acl.model import Operation, ResourceType
from .topics import storage_error_code

if TYPE_CHECKING:
    from .topics import TopicStore


class ProducersApi:
    def __init__(self, topics: TopicStore) -> None:
        self.topics = topics

    def describe_producers(self, ctx: RequestContext, req: Any) -> Any:
        topics_out = []
        for t in req.topics:
            allowed = ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
            parts = []
            for index in t.partition_indexes:
                entry: dict[str, Any] = dict(
                    partition_index=index, error_code=0, error_message=None, active_producers=[]
                )
                plog = self.topics.partition(t.name, index) if allowed else None
                if not allowed:
                    entry["error_code"] = ErrorCode.topic_authorization_failed
                elif plog is None:
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                elif plog.offline is not None:
                    entry["error_code"] = storage_error_code(plog.offline)
                else:
                    entry["active_producers"] = [
                        dict(
                            producer_id=p.producer_id,
                            producer_epoch=p.producer_epoch,
                            last_sequence=p.last_sequence,
                            last_timestamp=p.last_timestamp,
                            coordinator_epoch=p.coordinator_epoch,
                            current_txn_start_offset=p.txn_start_offset,
                        )
                        for p in plog.producer_state.producers()
                    ]
                parts.append(entry)
            topics_out.append(dict(name=t.name, partitions=parts))
        return ctx.respond(throttle_time=0, topics=topics_out)
