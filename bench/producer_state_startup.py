"""Start-up cost of rebuilding producer state (issue 16): how long ``PartitionLog.open`` takes
for one partition written by idempotent and transactional producers: after a clean close (its
snapshot at the log end), after a crash (the snapshot of the last roll: the active segment is
replayed), without any snapshot (the whole log replayed), and with the producer-state rebuild
switched off (the log recovery alone: what start-up cost before).

No broker: the log is built and opened in this process (fsync off while building). Prints JSON.

    .venv/bin/python bench/producer_state_startup.py [--mb 128] [--segment-mb 32]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.protocol.control import encode_marker  # noqa: E402
from kcoord.protocol.record_encoding import build_batch  # noqa: E402
from kcoord.storage.log import PartitionLog  # noqa: E402
from kcoord.storage.txn_log import TxnLogMixin  # noqa: E402

T0 = 1_700_000_000_000


def build(path: Path, total_bytes: int, segment_bytes: int) -> dict[str, int]:
    log = PartitionLog.open(path, segment_bytes=segment_bytes, fsync=False)
    value = b"x" * 100
    seq = [0] * 100
    batches = markers = 0
    while log.size_bytes < total_bytes:
        pid = batches % 100
        txn = pid >= 50  # half the producers are transactional
        log.append(build_batch([(b"k%d" % pid, value, (), T0)] * 10, producer_id=1000 + pid,
                               producer_epoch=0, base_sequence=seq[pid], is_transactional=txn))
        seq[pid] += 10
        batches += 1
        if txn and batches % 7 == 0:
            log.append(encode_marker(1000 + pid, 0, batches % 3 != 0, 0, T0))
            markers += 1
    stats = dict(batches=batches, markers=markers, bytes=log.size_bytes,
                 segments=len(log.segment_base_offsets), end=log.log_end_offset,
                 active_segment_bytes=log._segments[-1].size)
    log.close()
    return stats


def timed_open(path: Path, segment_bytes: int, drop: Callable[[int], bool]) -> float:
    """Seconds to open the log after deleting the snapshots ``drop`` picks (by offset)."""
    for name in os.listdir(path):
        if name.endswith(".snapshot") and drop(int(name[:20])):
            os.remove(path / name)
    subprocess.run(["sync"], check=False)
    started = time.perf_counter()
    log = PartitionLog.open(path, segment_bytes=segment_bytes, fsync=False)
    took = time.perf_counter() - started
    log.close()  # a clean close: writes the snapshot at the log end again
    return round(took, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--segment-mb", type=int, default=32)
    args = parser.parse_args()
    segment_bytes = args.segment_mb << 20
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t-0"
        built = build(path, args.mb << 20, segment_bytes)
        end = built["end"]

        def best(drop: Callable[[int], bool]) -> float:
            return min(timed_open(path, segment_bytes, drop) for _ in range(3))

        clean = best(lambda _o: False)
        crash = best(lambda o: o == end)  # no snapshot at the end: the active segment replayed
        real = TxnLogMixin._txn_recover
        TxnLogMixin._txn_recover = lambda self: None  # type: ignore[method-assign]
        try:
            recovery_only = best(lambda _o: False)
        finally:
            TxnLogMixin._txn_recover = real  # type: ignore[method-assign]
        whole = best(lambda _o: True)
    print(json.dumps(dict(
        log=built,
        segment_mb=args.segment_mb,
        open_seconds=dict(
            recovery_only=recovery_only,
            after_clean_close=clean,
            after_crash_active_segment_replayed=crash,
            without_snapshots_whole_log_replayed=whole,
        ),
    ), indent=2))


if __name__ == "__main__":
    main()
