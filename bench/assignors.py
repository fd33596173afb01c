"""Wall time of the KIP-848 server-side assignors (coordinator/consumer/assignors), in ms per call.

The coordinator runs an assignor on its event loop each time a group's target assignment is
recomputed, so this is how long one rebalance holds the loop. For each assignor (``uniform``,
``range``), subscription shape and size (members x partitions: 10 x 100, 100 x 1,000,
1,000 x 10,000) it times three events:

* ``initial``: nobody holds anything yet;
* ``join``: one member joins a group that holds the ``initial`` assignment;
* ``leave``: one member leaves a group that holds the ``initial`` assignment.

Shapes: ``homogeneous`` (every member subscribes to every topic; the partitions in
``max(10, partitions / 100)`` topics, and, separately, in one topic) and ``heterogeneous``
(every member subscribes to a random half of the topics, the same seed every run). Member ids
are random 22-character strings like the ids KIP-848 clients generate. Each case reports the
best and the median of ``--repeat`` calls, how many partitions changed owner (``moved``:
for ``join``/``leave``, against the assignment the group held) and the spread of the members'
partition counts (``min``/``max``).

    .venv/bin/python bench/assignors.py [--repeat 7] [--quick]

Prints one JSON document. Figures are wall-clock on a shared machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import string
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.coordinator.consumer.assignors import ASSIGNORS, AssignmentMember, TopicId  # noqa: E402

Assignment = dict[str, dict[TopicId, frozenset[int]]]
SIZES = ((10, 100), (100, 1_000), (1_000, 10_000))


def _checkout() -> str:
    """The commit measured (with "+changes" when the tree differs from it), or "unknown"."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def _member_id(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits + "-_", k=22))


def _group(
    members: int, partitions: int, topics: int, heterogeneous: bool, seed: int
) -> tuple[list[AssignmentMember], dict[TopicId, int], random.Random]:
    rng = random.Random(seed)
    ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(topics)]
    counts = {t: partitions // topics for t in ids}
    result = []
    for i in range(members):
        if heterogeneous:
            chosen = set(rng.sample(ids, max(1, topics // 2)))
            chosen.add(ids[i % topics])  # every topic has a subscriber
            subscribed = frozenset(chosen)
        else:
            subscribed = frozenset(ids)
        result.append(AssignmentMember(_member_id(rng), None, None, subscribed, {}))
    return result, counts, rng


def _with_current(members: Sequence[AssignmentMember], held: Assignment) -> list[AssignmentMember]:
    return [
        AssignmentMember(m.member_id, m.instance_id, m.rack_id, m.subscribed, held[m.member_id])
        for m in members
    ]


def _moved(before: Assignment, after: Assignment) -> int:
    owner = {(t, p): mid for mid, topics in before.items() for t, ps in topics.items() for p in ps}
    return sum(
        1
        for mid, topics in after.items()
        for t, ps in topics.items()
        for p in ps
        if owner.get((t, p), mid) != mid
    )


def _time(
    assign: Any, members: Sequence[AssignmentMember], counts: Mapping[TopicId, int], repeat: int
) -> tuple[Assignment, float, float]:
    took = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = assign(members, counts)
        took.append((time.perf_counter() - start) * 1e3)
    return result, round(min(took), 3), round(statistics.median(took), 3)


def _cases(quick: bool) -> list[tuple[str, int, int, int]]:
    cases = []
    for members, partitions in SIZES[:-1] if quick else SIZES:
        topics = max(10, partitions // 100)
        cases.append(("homogeneous", members, partitions, topics))
        cases.append(("homogeneous", members, partitions, 1))
        cases.append(("heterogeneous", members, partitions, topics))
    return cases


def run(repeat: int, quick: bool) -> list[dict[str, Any]]:
    results = []
    for name, assignor in ASSIGNORS.items():
        for shape, members, partitions, topics in _cases(quick):
            group, counts, rng = _group(members, partitions, topics, shape != "homogeneous", 7)
            layout = f"{topics} topics x {partitions // topics}"
            initial, best, median = _time(assignor.assign, group, counts, repeat)
            rows = [("initial", best, median, initial, None)]
            holding = _with_current(group, initial)

            joiner_subs = group[rng.randrange(members)].subscribed
            joiner = AssignmentMember(_member_id(rng), None, None, joiner_subs, {})
            joined, best, median = _time(assignor.assign, [*holding, joiner], counts, repeat)
            rows.append(("join", best, median, joined, initial))

            leaver = holding[members // 2]
            staying = [m for m in holding if m is not leaver]
            left, best, median = _time(assignor.assign, staying, counts, repeat)
            rows.append(("leave", best, median, left, initial))

            for event, best, median, result, before in rows:
                sizes = [sum(map(len, t.values())) for t in result.values()]
                results.append(
                    {
                        "assignor": name,
                        "subscriptions": shape,
                        "members": members,
                        "partitions": partitions,
                        "layout": layout,
                        "event": event,
                        "best_ms": best,
                        "median_ms": median,
                        "moved": None if before is None else _moved(before, result),
                        "min": min(sizes),
                        "max": max(sizes),
                    }
                )
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7, help="calls per case")
    parser.add_argument("--quick", action="store_true", help="skip 1,000 x 10,000")
    args = parser.parse_args()
    out = {
        "benchmark": "assignors",
        "date": datetime.date.today().isoformat(),
        "commit": _checkout(),
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": os.getloadavg(),
            "python": platform.python_version(),
        },
        "repeat": args.repeat,
        "unit": "ms per call (wall clock)",
        "results": run(args.repeat, args.quick),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
