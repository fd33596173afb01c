"""A healthy producer and consumer group that keep running beside the abuse probes.

One thread produces a small message every few milliseconds (confluent-kafka, acks=all) to the
``healthy`` topic; another runs a confluent-kafka consumer in group ``healthy-group`` that
commits as it goes. ``wait_progress`` waits (bounded) until both have moved on by a few
messages, which shows that produce, fetch, heartbeats and commits all still work.
"""

from __future__ import annotations

import threading
from typing import Any

from tests.integration.clients import create_topic
from tests.integration.harness import wait_for

TOPIC = "healthy"
GROUP = "healthy-group"


class HealthyGroup:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.produced = 0
        self.consumed = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        create_topic(self.bootstrap, TOPIC, 2)
        for target in (self._produce, self._consume):
            t = threading.Thread(target=target, name=f"healthy-{target.__name__}", daemon=True)
            t.start()
            self._threads.append(t)
        self.wait_progress(what="start-up", timeout=60)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def wait_progress(self, what: str = "", count: int = 20, timeout: float = 45.0) -> None:
        """Wait until at least ``count`` more messages were produced and consumed."""
        produced, consumed = self.produced, self.consumed
        wait_for(
            lambda: self.produced >= produced + count and self.consumed >= consumed + count,
            timeout,
            what=f"the healthy group to make progress after {what or 'the probe'}"
            f" (produced {self.produced - produced}, consumed {self.consumed - consumed};"
            f" errors {self.errors[-5:]})",
        )

    def _on_error(self, err: Any) -> None:
        self.errors.append(str(err))

    def _produce(self) -> None:
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "error_cb": self._on_error,
            }
        )

        def delivered(err: Any, _msg: Any) -> None:
            if err is None:
                self.produced += 1
            else:
                self.errors.append(f"delivery: {err}")

        i = 0
        while not self._stop.is_set():
            p.produce(TOPIC, key=str(i % 7).encode(), value=b"v%d" % i, on_delivery=delivered)
            p.poll(0.005)
            i += 1
        p.flush(10)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
                "error_cb": self._on_error,
            }
        )
        c.subscribe([TOPIC])
        try:
            while not self._stop.is_set():
                for m in c.consume(num_messages=100, timeout=0.1):
                    if m.error():
                        self.errors.append(f"consume: {m.error()}")
                    else:
                        self.consumed += 1
        finally:
            c.close()
