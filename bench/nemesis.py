"""The long fault-injection run: tests/integration/nemesis.py for as long as asked, one JSON.

Three kcoord nodes over a throwaway PostgreSQL, an idempotent producer, a classic and a KIP-848
group committing, and one fault at a time (SIGKILL, SIGSTOP past the session, SIGTERM restart,
PostgreSQL SIGKILL); then the checker (acknowledged records readable, no acknowledged commit
followed by a lower one, leader epochs never decreasing along a partition). The figures: faults
injected by kind, records and commits acknowledged and checked, batches checked, anomalies.

    .venv/bin/python bench/nemesis.py [--seconds 600] [--seed N] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from tests.integration import nemesis  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kcoord-nemesis-") as root:
        report = nemesis.run(Path(root), args.seconds, seed, log=lambda s: print(s, file=sys.stderr))
    result = {
        "benchmark": "nemesis",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "wall_s": round(time.monotonic() - started, 1),
        **dataclasses.asdict(report),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 1 if report.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
