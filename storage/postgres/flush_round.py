"""A flush round over several PostgreSQL logs of one engine: everything waiting in them written in
one database transaction (``storage.postgres.flush``), what broker/data/flusher.py hands an
engine's logs to together (``FlushTogether``, the engine's ``SharedFlush``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from kcoord.storage.engine import LogClosed

from .flush import PendingFlush, write
from .log import PostgresLog
from .pool import ConnectionPool, database_errors


def flush_logs(
    pool: ConnectionPool, logs: Sequence[PostgresLog]
) -> dict[PostgresLog, OSError | LogClosed]:
    """Flush ``logs`` in one transaction (``storage.postgres.flush``); those that failed, each
    with its error: offline from then on, what waited in them dropped (storage.postgres.log's docstring).
    Blocking; the flush locks are taken in row order, so concurrent callers cannot deadlock."""
    failed: dict[PostgresLog, OSError | LogClosed] = {}
    ordered = sorted(set(logs), key=lambda plog: plog.row_id)
    with contextlib.ExitStack() as held:
        for plog in ordered:
            held.enter_context(plog._flush_lock)
        pending: dict[PostgresLog, PendingFlush] = {}
        for plog in ordered:
            try:
                plog._check_open()
            except (OSError, LogClosed) as e:  # offline, or closed under a round (a hand-over)
                failed[plog] = e
                continue
            waiting = plog._pending_flush()
            if waiting is not None:
                pending[plog] = waiting
        if not pending:
            return failed
        errors: dict[int, OSError]
        try:
            with database_errors():
                errors = dict(write(pool, list(pending.values())))
        except OSError as e:
            errors = {waiting.row_id: e for waiting in pending.values()}
        for plog, waiting in pending.items():
            error = errors.get(waiting.row_id)
            if error is None:
                plog._flushed_up_to(waiting)
            else:
                failed[plog] = plog._went_offline(waiting, error)
    return failed


class FlushTogether:
    """An engine's logs flushed in one transaction (:func:`flush_logs` over its pool): what a
    flush round (broker/data/flusher.py) hands them to."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool

    def flush_all(self, logs: Sequence[PostgresLog]) -> dict[PostgresLog, OSError | LogClosed]:
        return flush_logs(self.pool, logs)
