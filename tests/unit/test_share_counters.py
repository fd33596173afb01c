"""The share layer's counters (broker/share/counters.py) with a fake clock: acknowledgements
counted by Kafka's ack types, and the per-second rate over the last ten seconds."""

from __future__ import annotations

from kcoord.broker.share.counters import (
    RATE_WINDOW_S,
    PartitionCounters,
    RecentRate,
    ShareCounters,
)
from kcoord.share.model import AckType
from kcoord.share.partition import Acknowledgement


def test_acknowledgements_count_records_by_type_a_range_whole_or_per_offset() -> None:
    counters, partition = ShareCounters(), PartitionCounters()
    acks = [
        Acknowledgement(0, 9, (AckType.ACCEPT,)),
        Acknowledgement(10, 13, (AckType.REJECT, AckType.RELEASE, AckType.GAP, AckType.ACCEPT)),
        Acknowledgement(14, 20, (AckType.RENEW,)),
    ]
    counters.count_acknowledgements(partition, acks, 5_000)
    assert counters.acknowledged == {AckType.ACCEPT: 11, AckType.RELEASE: 1, AckType.REJECT: 1}
    assert partition.acknowledged == 13  # GAP and RENEW settle nothing processed


def test_the_rate_covers_the_last_ten_seconds_and_forgets_older_ones() -> None:
    rate = RecentRate()
    rate.add(50, 100_000)
    rate.add(50, 104_500)
    assert rate.per_second(105_000) == 100 / RATE_WINDOW_S
    assert rate.per_second(109_999) == 100 / RATE_WINDOW_S
    assert rate.per_second(110_000) == 50 / RATE_WINDOW_S  # second 100 left the window
    assert rate.per_second(200_000) == 0


def test_request_counts_are_per_topic_and_a_topic_fails_once() -> None:
    counters = ShareCounters()
    counters.count_fetch({"a": False, "b": True})
    counters.count_acknowledge({"a": True})
    assert (counters.fetch_requests, counters.fetch_failed) == (2, 1)
    assert (counters.acknowledge_requests, counters.acknowledge_failed) == (1, 1)
