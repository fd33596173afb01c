"""What the share layer counts as it works: plain integers, raised on the request path and read
by ``/metrics`` at scrape time (broker/metrics/share_state.py) and by the web console.

They are the figures of Kafka's share metrics: ``ShareGroupMetrics`` (records acknowledged by
type), ``SharePartitionMetrics`` (acquisition locks timed out) and the share rates of
``BrokerTopicMetrics`` (ShareFetch and ShareAcknowledge requests, and those that failed, counted
once per topic of a request as Kafka marks them). Kafka keeps rates; Prometheus takes the rate
of a counter itself, so only totals are kept here. Per share partition, :class:`PartitionCounters`
keeps the records acknowledged and their recent rate (the console's acknowledgements per
second).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kcoord.share.model import AckType
from kcoord.share.partition import Acknowledgement

ACK_TYPE_NAMES: dict[int, str] = {
    AckType.ACCEPT: "Accept",
    AckType.RELEASE: "Release",
    AckType.REJECT: "Reject",
}
"""The acknowledgement types counted, by Kafka's ``ackType`` tag value (GAP and RENEW settle
nothing a consumer processed: Kafka counts neither)."""

RATE_WINDOW_S = 10
"""The acknowledgements-per-second rate is taken over this many seconds."""


def acknowledged_by_type(acks: Sequence[Acknowledgement]) -> Iterable[tuple[int, int]]:
    """(ack type, records) of one partition's acknowledgements: a batch with one type counts
    its whole range, one with a type per offset counts each offset."""
    for ack in acks:
        if len(ack.types) == 1:
            yield ack.types[0], ack.last_offset - ack.first_offset + 1
        else:
            for t in ack.types:
                yield t, 1


class RecentRate:
    """Events per second over the last :data:`RATE_WINDOW_S` seconds: a ring of per-second
    counts, the current second's included (so the rate of a steady flow reads a little low
    until the second is over)."""

    __slots__ = ("_counts", "_second")

    def __init__(self) -> None:
        self._counts = [0] * RATE_WINDOW_S
        self._second = 0

    def _roll(self, second: int) -> None:
        """Zero the seconds passed since the last event, up to ``second``."""
        if second <= self._second:
            return
        if second - self._second >= RATE_WINDOW_S:
            self._counts = [0] * RATE_WINDOW_S
        else:
            for s in range(self._second + 1, second + 1):
                self._counts[s % RATE_WINDOW_S] = 0
        self._second = second

    def add(self, n: int, now_ms: int) -> None:
        second = now_ms // 1000
        self._roll(second)
        if second >= self._second:  # a clock stepping back drops the event from the rate
            self._counts[second % RATE_WINDOW_S] += n

    def per_second(self, now_ms: int) -> float:
        self._roll(now_ms // 1000)
        return sum(self._counts) / RATE_WINDOW_S


class PartitionCounters:
    """One share partition's acknowledgements since it was loaded here."""

    __slots__ = ("acknowledged", "rate")

    def __init__(self) -> None:
        self.acknowledged = 0
        """Records acknowledged (accepted, released or rejected)."""
        self.rate = RecentRate()


class ShareCounters:
    """The broker's share totals since start (module docstring)."""

    __slots__ = (
        "acknowledged",
        "lock_timeouts",
        "fetch_requests",
        "fetch_failed",
        "acknowledge_requests",
        "acknowledge_failed",
    )

    def __init__(self) -> None:
        self.acknowledged: dict[int, int] = dict.fromkeys(ACK_TYPE_NAMES, 0)
        """Records acknowledged, by ack type (:data:`ACK_TYPE_NAMES`' keys)."""
        self.lock_timeouts = 0
        """Acquired records whose acquisition lock ran out (given back, or archived)."""
        self.fetch_requests = 0
        self.fetch_failed = 0
        self.acknowledge_requests = 0
        self.acknowledge_failed = 0

    def count_acknowledgements(
        self, partition: PartitionCounters, acks: Sequence[Acknowledgement], now_ms: int
    ) -> None:
        """Acknowledgements applied (and durable) in one share partition."""
        total = 0
        by_type = self.acknowledged
        for kind, n in acknowledged_by_type(acks):
            if kind in by_type:
                by_type[kind] += n
                total += n
        if total:
            partition.acknowledged += total
            partition.rate.add(total, now_ms)

    def count_fetch(self, topics: dict[str, bool]) -> None:
        """A ShareFetch's topics (name -> whether a partition of it failed)."""
        self.fetch_requests += len(topics)
        self.fetch_failed += sum(topics.values())

    def count_acknowledge(self, topics: dict[str, bool]) -> None:
        """The topics acknowledged in a ShareFetch or ShareAcknowledge (name -> whether a
        partition's acknowledgement failed)."""
        self.acknowledge_requests += len(topics)
        self.acknowledge_failed += sum(topics.values())
