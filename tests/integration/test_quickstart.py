"""The README's quickstart, run as written: its commands are read out of README.md and run in
bash from the checkout, so the quickstart cannot drift from what works.

It runs in a network namespace of its own (``unshare -n``, as root), where the quickstart's fixed
ports (9092, 9308) are free whatever else runs on this machine. One change is made to what the
README says: ``./kcoord serve`` is given ``--data-dir`` in a temporary directory, so that the
checkout's ``./data`` (a developer's broker) is left alone. ``scripts/bootstrap`` runs first,
outside the namespace, since ``./kcoord`` may want to install into the venv, and the namespace
has no network.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from .harness import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # installs and builds: minutes


def quickstart() -> tuple[list[str], list[str], list[str], str]:
    """The README's quickstart: the serve command, the commands run beside it, the sample output
    shown for them, and the console's URL."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)
    shell = [body.strip().splitlines() for lang, body in blocks if lang == "sh"]
    output = [body.strip().splitlines() for lang, body in blocks if lang == ""]
    assert len(shell) == 2 and len(output) == 1, blocks
    console = re.search(r"<(http://127\.0\.0\.1:\d+/)>", section)
    assert console, "the quickstart names the console's address"
    return shell[0], shell[1], output[0], console.group(1)


def _namespace_runner() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("the quickstart runs in a network namespace of its own, which needs root")
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"the quickstart's network namespace needs {tool} (util-linux, iproute2)")
    return ["unshare", "--net"]


def test_the_quickstart_works_as_written(tmp_path: Path) -> None:
    runner = _namespace_runner()
    serve, commands, sample, console = quickstart()
    assert serve == ["./kcoord serve"]  # the console is on by default, at 127.0.0.1:9308
    subprocess.run([str(ROOT / "scripts" / "bootstrap")], cwd=ROOT, check=True, timeout=900)
    out = tmp_path / "out"
    out.mkdir()
    script = [
        "set -u",
        "ip link set lo up",
        f"cd {shlex.quote(str(ROOT))}",
        f"{serve[0]} --data-dir {shlex.quote(str(tmp_path / 'data'))} > {out}/serve.log 2>&1 &",
        "broker=$!",
        # The broker is ready when its Kafka port accepts a connection (bounded: 60 s).
        "for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.2; done",
    ]
    for i, command in enumerate(commands):
        script.append(f"{command} > {out}/{i}.out 2> {out}/{i}.err; echo $? > {out}/{i}.rc")
    script += [
        # What the console shows, read the way its page reads it.
        f".venv/bin/python -c 'import sys, urllib.request; "
        f'base = sys.argv[1]; open(sys.argv[2], "wb").write(urllib.request.urlopen(base, timeout=10).read()); '
        f'open(sys.argv[3], "wb").write(urllib.request.urlopen(base + "api/groups/example-group", timeout=10).read())\' '
        f"{console} {out}/console.html {out}/console.json",
        "kill -TERM $broker; wait $broker; echo $? > " + f"{out}/serve.rc",
    ]
    done = subprocess.run(
        [*runner, "bash", "-c", "\n".join(script)], capture_output=True, text=True, timeout=600
    )
    log = (out / "serve.log").read_text() if (out / "serve.log").exists() else ""
    assert done.returncode == 0, done.stderr[-3000:] + log[-3000:]
    results = {}
    for i, command in enumerate(commands):
        text, errors = (out / f"{i}.out").read_text(), (out / f"{i}.err").read_text()
        assert (out / f"{i}.rc").read_text().strip() == "0", f"{command}:\n{errors[-3000:]}\n{log[-2000:]}"
        results[command.split("  ")[0].strip()] = text
    assert (out / "serve.rc").read_text().strip() == "0", log[-3000:]

    consumed = next(t for c, t in results.items() if "example_consumer.py" in c)
    assert len(re.findall(r"^example-events-\d@\d+: ", consumed, flags=re.M)) == 20
    listed = next(t for c, t in results.items() if c.startswith("./kcoord groups list"))
    assert listed.splitlines()[1].split() == ["example-group", "classic", "Empty"]
    described = next(t for c, t in results.items() if c.startswith("./kcoord groups describe"))
    # The same columns as the README's sample, and the group's row for every partition.
    assert described.splitlines()[0].split() == sample[0].split()
    rows = [line.split() for line in described.splitlines()[1:] if line.startswith("example-group")]
    assert sorted(int(r[2]) for r in rows) == [0, 1, 2]
    assert sum(int(r[3]) for r in rows) >= 20  # every consumed message committed
    assert sample[1].split()[:3] == ["example-group", "example-events", "0"]
    topic = next(t for c, t in results.items() if c.startswith("./kcoord topics describe"))
    # kafka-topics.sh's layout: the topic's line, then a line per partition with its offsets.
    assert re.search(r"^Topic: example-events\tTopicId: \S+\tPartitionCount: 3\t", topic, flags=re.M)
    ends = [int(n) for n in re.findall(r"^\tTopic: example-events\tPartition: \d.*\tLogEndOffset: (\d+)$",
                                       topic, flags=re.M)]  # fmt: skip
    assert len(ends) == 3 and sum(ends) >= 20, topic
    # consume -o -3 -e: the last 3 records of each partition (fewer where it holds fewer), then exits.
    consumed_last = next(t for c, t in results.items() if c.startswith("./kcoord consume"))
    assert len(consumed_last.splitlines()) == sum(min(3, n) for n in ends), consumed_last
    assert b"<html" in (out / "console.html").read_bytes().lower()
    group = json.loads((out / "console.json").read_text())
    assert group["group"] == "example-group" and group["state"] == "Empty", group
    assert group["rebalances"], "the rebalance timeline shows the example's rebalances"
