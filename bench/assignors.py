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

``--kafka`` times Kafka's own assignor benchmarks instead (jmh-benchmarks, ``assignor/``), with
their shapes: ``memberCount`` members, ``memberCount x partitionsToMemberRatio`` partitions
spread evenly over ``topicCount`` topics, members ``member0``... subscribed to every topic
(``HOMOGENEOUS``) or split into 5 buckets of members and topics, each bucket's members
subscribed to its topics (``HETEROGENEOUS``); no racks.

* ``ServerSideAssignorBenchmark.doAssignment``: one ``assign`` call over members built beforehand
  (as Kafka builds its GroupSpec in the set-up); ``FULL``: nobody holds anything;
  ``INCREMENTAL``: ``memberCount - 1`` members hold the assignment computed for them and
  ``newMember`` joins.
* ``TargetAssignmentBuilderBenchmark.build``: the uniform assignor through the target builder
  (coordinator/consumer/target.py ``update_target``: the members' subscriptions resolved to
  topic ids, the assignor, the target records of the members whose target changed), in a group
  of ``memberCount - 1`` members holding their target when ``newMember`` joins. The group's
  previous target is put back between calls, outside the timed region.

Kafka's figure for a case, where its PR #17133 published one, is in ``kafka_ms``. The cyclic
garbage collector is tuned as ``kcoord serve`` tunes it (``kcoord.cli._tune_collector``: what
the set-up built frozen, young collections every 7,000 objects), so a full collection walks
what one call allocates, not the benchmark's groups.

    .venv/bin/python bench/assignors.py [--repeat 7] [--quick] [--kafka [--members 5000 ...]]

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
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.cli import _tune_collector  # noqa: E402
from kcoord.compiled import describe, is_compiled  # noqa: E402
from kcoord.coordinator.consumer.assignors import ASSIGNORS, AssignmentMember, TopicId  # noqa: E402
from kcoord.coordinator.consumer.group import ConsumerGroup  # noqa: E402
from kcoord.coordinator.consumer.member import ConsumerMember  # noqa: E402
from kcoord.coordinator.consumer.target import update_target  # noqa: E402
from kcoord.coordinator.consumer.topics import TopicInfo  # noqa: E402
from kcoord.coordinator.output import Record  # noqa: E402

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


# --kafka: Kafka's jmh-benchmarks shapes (module docstring).

KAFKA_BUCKETS = 5
KAFKA_FIGURES = {
    # (benchmark, assignor, subscriptions, assignment, members, ratio, topics): ms/op, from
    # apache/kafka PR #17133 (the "before" run; JMH average time, one thread).
    ("doAssignment", "uniform", "homogeneous", "full", 5000, 10, 1000): 1.714,
    ("doAssignment", "uniform", "homogeneous", "full", 5000, 50, 1000): 7.491,
    ("doAssignment", "uniform", "homogeneous", "full", 10000, 10, 1000): 4.309,
}
KAFKA_TARGETS = {("doAssignment", "uniform", "homogeneous", "full", 5000, 10, 1000): 2.0}
"""Issue 33's targets (ms per call, compiled build)."""


def _kafka_subscriptions(
    members: int, names: Sequence[str], heterogeneous: bool
) -> list[tuple[str, ...]]:
    """Each member's topic names (index i: ``member{i}``), as Kafka's AssignorBenchmarkUtils
    builds them; members of a bucket share one tuple (as Kafka's share one list)."""
    if not heterogeneous:
        every = tuple(names)
        return [every] * members
    buckets = min(KAFKA_BUCKETS, members)
    per_topics = -(-len(names) // buckets)
    per_members = -(-members // buckets)
    result: list[tuple[str, ...]] = []
    for b in range(buckets):
        chosen = tuple(names[b * per_topics : (b + 1) * per_topics])
        result.extend([chosen] * (min((b + 1) * per_members, members) - b * per_members))
    return result


def _kafka_spec(
    members: int, ratio: int, topics: int, heterogeneous: bool
) -> tuple[list[str], list[tuple[str, ...]], dict[str, TopicInfo]]:
    """Member ids, their subscriptions and the topics (by name) of one of Kafka's shapes."""
    rng = random.Random(7)
    names = [f"topic-{i}" for i in range(topics)]
    per_topic = members * ratio // topics
    infos = {n: TopicInfo(uuid.UUID(int=rng.getrandbits(128)), n, per_topic) for n in names}
    return (
        [f"member{i}" for i in range(members)],
        _kafka_subscriptions(members, names, heterogeneous),
        infos,
    )


def _as_members(
    ids: Sequence[str],
    subs: Sequence[tuple[str, ...]],
    infos: Mapping[str, TopicInfo],
    held: Assignment,
) -> list[AssignmentMember]:
    """The assignor's view of the members; equal subscriptions share one frozenset (as the
    coordinator's target builder makes them)."""
    resolved: dict[int, frozenset[TopicId]] = {}
    result = []
    for member_id, names in zip(ids, subs, strict=True):
        topic_ids = resolved.get(id(names))
        if topic_ids is None:
            topic_ids = resolved[id(names)] = frozenset(infos[n].topic_id for n in names)
        result.append(AssignmentMember(member_id, None, None, topic_ids, held.get(member_id, {})))
    return result


def _measure(
    call: Callable[[], Any], repeat: int, reset: Callable[[], None] = lambda: None
) -> tuple[Any, dict[str, float]]:
    """``call``'s last result and its best and median wall time and best CPU time (ms) over
    ``repeat`` calls after one to warm up; ``reset`` runs before each, outside the timing.
    CPU time (this process's) leaves out the time other processes held the cores."""
    _tune_collector()
    wall, cpu = [], []
    result = None
    for _ in range(repeat + 1):
        reset()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = call()
        cpu.append((time.process_time() - start_cpu) * 1e3)
        wall.append((time.perf_counter() - start) * 1e3)
    wall, cpu = wall[1:], cpu[1:]
    figures = {
        "best_ms": round(min(wall), 3),
        "median_ms": round(statistics.median(wall), 3),
        "best_cpu_ms": round(min(cpu), 3),
    }
    return result, figures


def run_kafka(
    repeat: int, grid: Sequence[tuple[int, int, int]], builder: bool
) -> list[dict[str, Any]]:
    """Kafka's ServerSideAssignorBenchmark (and, with ``builder``, TargetAssignmentBuilderBenchmark)
    over ``grid``: (members, partitions-to-member ratio, topics) triples."""
    results = []
    for members, ratio, topics in grid:
        for shape in ("homogeneous", "heterogeneous"):
            ids, subs, infos = _kafka_spec(members, ratio, topics, shape == "heterogeneous")
            counts = {info.topic_id: info.partitions for info in infos.values()}
            runs: list[tuple[str, str, str, Callable[[], Any], Callable[[], None]]] = []
            for name, assignor in ASSIGNORS.items():
                full = _as_members(ids, subs, infos, {})
                runs.append(
                    ("doAssignment", name, "full", partial(assignor.assign, full, counts), _nothing)
                )
                # INCREMENTAL: memberCount - 1 members hold their assignment; newMember joins
                # with the subscription of member memberCount - 2.
                held = assignor.assign(_as_members(ids[:-1], subs[:-1], infos, {}), counts)
                grown = _as_members(ids[:-1], subs[:-1], infos, held)
                grown += _as_members(["newMember"], [subs[-2]], infos, {})
                runs.append(
                    (
                        "doAssignment",
                        name,
                        "incremental",
                        partial(assignor.assign, grown, counts),
                        _nothing,
                    )
                )
            if builder:
                runs.append(("build", "uniform", "incremental", *_builder(ids, subs, infos)))
            for bench, name, kind, call, reset in runs:
                result, figures = _measure(call, repeat, reset)
                sizes = [sum(map(len, t.values())) for t in result.values()]
                key = (bench, name, shape, kind, members, ratio, topics)
                prefix = (
                    "ServerSideAssignorBenchmark."
                    if bench == "doAssignment"
                    else "TargetAssignmentBuilderBenchmark."
                )
                results.append(
                    {
                        "kafka_benchmark": prefix + bench,
                        "assignor": name,
                        "subscriptions": shape,
                        "assignment": kind,
                        "members": members,
                        "partitions_to_member_ratio": ratio,
                        "topics": topics,
                        "partitions": members * ratio // topics * topics,
                        **figures,
                        "kafka_ms": KAFKA_FIGURES.get(key),
                        "target_ms": KAFKA_TARGETS.get(key),
                        "min": min(sizes),
                        "max": max(sizes),
                    }
                )
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def _nothing() -> None:
    pass


def _builder(
    ids: Sequence[str], subs: Sequence[tuple[str, ...]], infos: dict[str, TopicInfo]
) -> tuple[Callable[[], Any], Callable[[], None]]:
    """TargetAssignmentBuilderBenchmark.build: ``update_target`` over a group of the members but
    the last, holding their uniform target, that ``newMember`` (every topic) has joined; and
    what puts the group's target back between calls. The call returns the new target."""
    group = ConsumerGroup("benchmark-group")
    group.subscribed = dict(infos)
    for member_id, names in zip(ids[:-1], subs[:-1], strict=True):
        group.members[member_id] = ConsumerMember(member_id, subscribed_topic_names=names)
    counts = {info.topic_id: info.partitions for info in infos.values()}
    held = ASSIGNORS["uniform"].assign(_as_members(ids[:-1], subs[:-1], infos, {}), counts)
    group.members["newMember"] = ConsumerMember("newMember", subscribed_topic_names=tuple(infos))
    records: list[Record] = []

    def build() -> Mapping[str, Any]:
        update_target(group, "uniform", records.append, 0)
        return group.target

    def reset() -> None:
        group.target = dict(held)
        records.clear()

    return build, reset


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7, help="calls per case")
    parser.add_argument("--quick", action="store_true", help="skip 1,000 x 10,000")
    parser.add_argument("--kafka", action="store_true", help="Kafka's jmh shapes instead")
    parser.add_argument("--members", default="1000,5000", help="--kafka: memberCount values")
    parser.add_argument("--ratio", default="10", help="--kafka: partitionsToMemberRatio values")
    parser.add_argument("--topics", default="100,1000", help="--kafka: topicCount values")
    parser.add_argument(
        "--no-builder", action="store_true", help="--kafka: skip the target builder"
    )
    parser.add_argument("--note", default="", help="a note stored in the JSON (machine load...)")
    args = parser.parse_args()
    load_start = os.getloadavg()
    if args.kafka:
        grid = [
            (m, r, t)
            for m in _ints(args.members)
            for r in _ints(args.ratio)
            for t in _ints(args.topics)
        ]
        results = run_kafka(args.repeat, grid, not args.no_builder)
    else:
        results = run(args.repeat, args.quick)
    out = {
        "benchmark": "assignors",
        "date": datetime.date.today().isoformat(),
        "commit": _checkout(),
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": load_start,
            "python": platform.python_version(),
        },
        "repeat": args.repeat,
        "unit": "ms per call (wall clock)",
        "results": results,
    }
    if args.kafka:
        out["benchmark"] = "assignors --kafka"
    if args.note:
        out["note"] = args.note
    out["machine"]["loadavg_end"] = os.getloadavg()
    out["hot_modules"] = describe()
    out["consumer_modules_compiled"] = [
        name
        for name, module in sys.modules.items()
        if name.startswith("kcoord.coordinator.consumer.") and is_compiled(module)
    ]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
