"""How long a broker takes to be useful (issue 30): from process start to the first accepted
request, and from ``kcoord.testing.broker()`` entry to a consumer group's first committed offset.

1. ``serve``: ``python -m kcoord serve --port 0 --ready-file F`` is started; the clock stops when
   an ApiVersions request sent on a new connection is answered (the ready file says where and
   when to send it; its time is reported too). Pure Python and, where a usable build exists, the
   compiled build; each warm (the modules' ``.pyc`` files and the page cache already there: one
   start is made and thrown away first), ``--runs`` times, on a new data directory each.
2. ``testing``: ``with kcoord.testing.broker() as b:`` (the ``--dev`` preset), then a
   confluent-kafka producer writes one record to a new topic and a consumer in a new group reads
   it and commits synchronously; the clock stops when the commit returns. The phases are
   reported too (ready, produced, first message, committed).

The interpreter is this one (``--python`` for the serve runs of another, e.g. a clean venv
without the test extras: where hypothesis is installed, kio's types import it, half a second of
every start). Prints JSON (``--out`` also writes it to a file).

    .venv/bin/python bench/startup.py [--runs 5] [--python PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import kcoord  # noqa: E402
from kcoord import compiled  # noqa: E402

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"


def _api_versions(bootstrap: str) -> None:
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
        size = struct.unpack(">i", _read(sock, 4))[0]
        body = _read(sock, size)
    correlation, error = struct.unpack(">ih", body[:6])
    assert (correlation, error) == (1, 0), (correlation, error)


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def serve_once(python: str, pure: bool) -> dict[str, float]:
    """Seconds from Popen to the ready file and to the first answered request."""
    work = Path(tempfile.mkdtemp(prefix="kcoord-bench-startup-"))
    ready = work / "ready"
    env = dict(os.environ)
    env.pop(compiled.PURE_ENV, None)
    if pure:
        env[compiled.PURE_ENV] = "1"
    home = str(Path(kcoord.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [home, env.get("PYTHONPATH")]))
    cmd = [python, "-m", "kcoord", "serve", "--port", "0", "--no-console",
           "--data-dir", str(work / "data"), "--ready-file", str(ready)]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = started + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kcoord serve did not start: {proc.stderr.read().decode()[-2000:]}"
                                   if proc.stderr else "kcoord serve did not start")
            time.sleep(0.002)
        at_ready = time.monotonic() - started
        _api_versions(ready.read_text().strip())
        answered = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return {"ready_file_s": at_ready, "first_request_s": answered}


def testing_once() -> dict[str, float]:
    """Seconds from kcoord.testing.broker() entry to each phase of a group's first commit."""
    from confluent_kafka import Consumer, Producer

    import kcoord.testing

    phases: dict[str, float] = {}
    started = time.monotonic()
    with kcoord.testing.broker() as b:
        phases["ready_s"] = time.monotonic() - started
        producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        producer.produce("bench-startup", b"first")
        assert producer.flush(30) == 0
        phases["produced_s"] = time.monotonic() - started
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-startup",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["bench-startup"])
        message = None
        while message is None or message.error() is not None:
            message = consumer.poll(0.05)
            if time.monotonic() - started > 60:
                raise RuntimeError("no message within 60 s")
        phases["first_message_s"] = time.monotonic() - started
        consumer.commit(message, asynchronous=False)
        phases["committed_s"] = time.monotonic() - started
        consumer.close()
    return phases


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = {"median": round(statistics.median(values), 3),
                    "min": round(min(values), 3), "max": round(max(values), 3)}
    return out


def _with_pure(pure: bool, fn: Any) -> Any:
    """Run ``fn`` with KCOORD_PURE_PYTHON set or unset in this process's environment (the
    brokers kcoord.testing starts inherit it)."""
    saved = os.environ.get(compiled.PURE_ENV)
    if pure:
        os.environ[compiled.PURE_ENV] = "1"
    else:
        os.environ.pop(compiled.PURE_ENV, None)
    try:
        return fn()
    finally:
        if saved is None:
            os.environ.pop(compiled.PURE_ENV, None)
        else:
            os.environ[compiled.PURE_ENV] = saved


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--python", default=sys.executable, help="the interpreter of the serve runs")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    build, reason = compiled.usable_build(compiled.MANIFEST, compiled.ROOT, {})
    builds = [("pure", True)] + ([("compiled", False)] if build is not None else [])
    result: dict[str, Any] = {
        "bench": "startup",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_1min": round(os.getloadavg()[0], 2)},
        "serve_python": args.python,
        "compiled_build": "usable" if build is not None else reason,
        "serve": {},
        "testing_to_first_commit": {},
    }
    for name, pure in builds:
        serve_once(args.python, pure)  # warm-up, thrown away
        result["serve"][name] = summary([serve_once(args.python, pure) for _ in range(args.runs)])
        _with_pure(pure, testing_once)  # warm-up
        result["testing_to_first_commit"][name] = summary(
            [_with_pure(pure, testing_once) for _ in range(args.runs)]
        )
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
