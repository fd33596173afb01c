"""Share consumers for the tests: confluent-kafka ``ShareConsumer`` (librdkafka's share consumer)
in a thread of the test (:class:`ShareMember`) or in a process of its own that can be SIGKILLed
(:class:`ShareMemberProcess`, scripts/share_consumer.py). Each keeps what it received, in order:
(topic, partition, offset, value, delivery count if the client gives it, else None)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .harness import ROOT

Received = tuple[str, int, int, bytes | None]


def share_config(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group, **extra}


class ShareMember:
    """One ShareConsumer polling in a thread. ``decide(record) -> ack type`` chooses each
    record's acknowledgement in explicit mode (None: implicit mode, records accepted on the next
    poll). In explicit mode the acknowledgements are committed after each batch: ``committed``
    counts the commits made, ``acknowledged`` holds the (partition, offset) of those the broker
    answered without error, and ``on_acknowledged`` is told of them as they are."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str],
        name: str,
        decide: Callable[[Received], int] | None = None,
        on_acknowledged: Callable[[list[tuple[int, int]]], None] | None = None,
        **extra: Any,
    ) -> None:
        from confluent_kafka import ShareConsumer

        self.name = name
        self.decide = decide
        config = share_config(bootstrap, group, **extra)
        if decide is not None:
            config["share.acknowledgement.mode"] = "explicit"
        self.consumer = ShareConsumer(config)
        self.consumer.subscribe(topics)
        self.on_acknowledged = on_acknowledged
        self.received: list[Received] = []
        self.acknowledged: list[tuple[int, int]] = []
        self.errors: list[str] = []
        self.committed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"share-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self.consumer
        while not self._stop.is_set():
            try:
                batch = consumer.poll(0.2)
            except Exception as e:  # noqa: BLE001 - kept for the test to show
                self.errors.append(repr(e))
                time.sleep(0.1)
                continue
            acks: list[tuple[Any, int]] = []
            for msg in batch:
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))
                    continue
                record = (msg.topic(), msg.partition(), msg.offset(), msg.value())
                with self._lock:
                    self.received.append(record)
                if self.decide is not None:
                    acks.append((msg, self.decide(record)))
            for msg, ack_type in acks:
                consumer.acknowledge(msg, ack_type)
            if acks:
                self._commit(acks)

    def _commit(self, acks: list[tuple[Any, int]]) -> None:
        try:
            results = self.consumer.commit_sync()
        except Exception as e:  # noqa: BLE001 - kept for the test to show
            self.errors.append(repr(e))
            return
        self.committed += 1
        done = {(tp.topic, tp.partition) for tp, error in results.items() if error is None}
        self.errors.extend(str(error) for error in results.values() if error is not None)
        confirmed = [(m.partition(), m.offset()) for m, _ in acks if (m.topic(), m.partition()) in done]
        with self._lock:
            self.acknowledged.extend(confirmed)
        if self.on_acknowledged is not None:
            self.on_acknowledged(confirmed)

    def offsets(self) -> list[tuple[int, int]]:
        with self._lock:
            return [(p, o) for _, p, o, _ in self.received]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.close()


class ShareMemberProcess:
    """A ShareConsumer in a process of its own (scripts/share_consumer.py), in explicit mode:
    it prints each record it receives as a JSON line and acknowledges none (``hold``) or all."""

    def __init__(self, bootstrap: str, group: str, topic: str, out: Path, hold: bool) -> None:
        self.out = out
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        script = Path(__file__).parent / "scripts" / "share_consumer.py"
        args = [sys.executable, str(script), bootstrap, group, topic, str(out), "hold" if hold else "accept"]
        self.proc = subprocess.Popen(args, env=env)

    def received(self) -> list[tuple[int, int]]:
        try:
            lines = self.out.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [tuple(json.loads(line)) for line in lines if line.strip()]  # type: ignore[misc]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
