"""Offline partitions: the error an offline partition log raises, and how going offline is
reported.

A partition log is *offline* when it could not be opened (``storage.file_engine.open_or_offline``
registers it offline so that the other partitions serve), when its active segment file is found
deleted under the running broker (checked at every flush: a file with no link left would be
lost at the next start, so what was written to it is refused, not acknowledged), or when an
append failed and could not be undone. From then on every operation on it raises
:class:`LogOffline`, an OSError (the Produce path answers KAFKA_STORAGE_ERROR for OSErrors),
until the broker restarts (files) or the partition is opened again (PostgreSQL, once the
database answers: ``StorageEngine.may_reopen``). Why it went offline is logged once, at ERROR,
with the offsets affected.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from kcoord.storage.files import describe_error
from kcoord.storage.recovery import segment_bases

log = logging.getLogger("kcoord.storage")


class LogOffline(OSError):
    """The partition is offline: it could not be opened, or its files were lost while it ran.

    Raised by every operation on an offline log (the Produce path answers KAFKA_STORAGE_ERROR
    for OSErrors). ``cause`` is what took the partition offline.
    """

    def __init__(self, path: Path, cause: BaseException | str) -> None:
        reason = cause if isinstance(cause, str) else describe_error(cause)
        super().__init__(errno.EIO, f"partition {path.name} is offline: {reason}")
        self.path = path
        self.cause = cause


class NotLeader(OSError):
    """Cluster mode: another node leads the partition (or none yet). A partition this node
    does not lead is registered with an offline log of this cause; clients are answered
    NOT_LEADER_OR_FOLLOWER (NOT_COORDINATOR for a coordinator's partition)."""


class LogFenced(OSError):
    """Another writer has the partition: its leader epoch or log end is not the one this log
    writes under (storage/postgres/flush.py). The log goes offline with this cause."""


def moved_away(offline: LogOffline | None) -> bool:
    """Whether a log is offline because the partition is (or is now) another node's: not
    worth opening again here, and answered NOT_LEADER_OR_FOLLOWER rather than as a failure."""
    return offline is not None and isinstance(offline.cause, (NotLeader, LogFenced))


def report_went_offline(
    path: Path, cause: BaseException | str, lost: str, until: str = "the broker restarts"
) -> None:
    """Log, at ERROR, that the running partition at ``path`` went offline because of ``cause``;
    ``lost`` says which offsets are affected, ``until`` when it serves again."""
    reason = cause if isinstance(cause, str) else describe_error(cause)
    log.error(
        "partition %s is offline: %s; %s; writes are refused until %s",
        path.name,
        reason,
        lost,
        until,
    )


def report_unopenable(path: Path, error: Exception) -> None:
    """Log, at ERROR, that the partition at ``path`` could not be opened because of ``error``,
    with the offsets that are unavailable as far as its segment file names tell (a traceback
    too when ``error`` is not an OSError: recovery did not expect it)."""
    try:
        bases = segment_bases(path)
    except OSError:
        bases = []
    if bases:
        affected = (
            f"offsets from {bases[0]} on ({len(bases)} segment(s), the last starting at"
            f" {bases[-1]})"
        )
    else:
        affected = "its offsets (segments unknown)"
    log.error(
        "partition %s is offline: it could not be opened: %s; %s are unavailable",
        Path(path).name,
        describe_error(error),
        affected,
        exc_info=False if isinstance(error, OSError) else error,
    )
