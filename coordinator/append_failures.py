"""An Output whose records could not be appended: the replies that still go, and each failure
action handed back to the part of the shard that attached it.

Every part that applies a write before it is durable attaches a failure action to the Output
(``Operation.on_failure``), naming the requests it answered. When the append fails,
:func:`handle_failed_append` passes the Output's other replies through unchanged and gives
each action, with the storage error mapped for the client, to its owner, which undoes what it
applied and answers its requests: the offsets manager (OffsetCommit), the classic group
manager (SyncGroup's group record, a static member's replacement), the consumer and share
group managers,
the transactional offsets (TxnOffsetCommit, markers) and DeleteGroups' undo
(:func:`coordinator.deletion.undo_delete`).
"""

from __future__ import annotations

from collections.abc import Hashable

from kcoord.coordinator.classic.join import StaticReplaceWriteFailed
from kcoord.coordinator.classic.manager import ClassicGroupManager, SyncWriteFailed
from kcoord.coordinator.consumer.change import ConsumerWriteFailed
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.deletion import DeleteWriteFailed, undo_delete
from kcoord.coordinator.offsets import CommitWriteFailed, OffsetManager
from kcoord.coordinator.output import Operation, Output, map_store_error
from kcoord.coordinator.share.manager import ShareGroupManager, ShareWriteFailed
from kcoord.coordinator.txn_offsets import MarkerWriteFailed, TxnOffsets
from kcoord.coordinator.txn_pending import TxnCommitWriteFailed


def handle_failed_append(
    op: Operation,
    output: Output,
    error: int,
    now_ms: int,
    classic: ClassicGroupManager,
    consumer: ConsumerGroupManager,
    share: ShareGroupManager,
    offsets: OffsetManager,
    txn: TxnOffsets,
) -> None:
    """Into the operation under way: the replies of ``output`` that no failure action covers,
    then each failure action's undo and answers (``error``: the log's error, mapped here)."""
    mapped = map_store_error(error)
    affected: set[Hashable] = set()
    for action in output.on_failure:
        affected.update(action.handles)
    for h, resp in output.replies:
        if h not in affected:
            op.reply(h, resp)
    for action in output.on_failure:
        if isinstance(action, CommitWriteFailed):
            offsets.commit_write_failed(action, mapped)
        elif isinstance(action, SyncWriteFailed):
            classic.sync_write_failed(action, mapped, now_ms)
        elif isinstance(action, StaticReplaceWriteFailed):
            classic.static_replace_write_failed(action, mapped, now_ms)
        elif isinstance(action, ConsumerWriteFailed):
            consumer.write_failed(action, mapped)
        elif isinstance(action, ShareWriteFailed):
            share.write_failed(action, mapped)
        elif isinstance(action, (TxnCommitWriteFailed, MarkerWriteFailed)):
            txn.write_failed(action, mapped)
        elif isinstance(action, DeleteWriteFailed):
            response = undo_delete(action, mapped, classic, consumer, share, offsets)
            op.reply(action.handle, response)
        else:
            raise TypeError(f"unknown failure action {action!r}")
