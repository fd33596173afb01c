"""Share groups seen from outside: ``/metrics`` and the console's JSON and page on a real broker
(``--metrics-port``) with real confluent-kafka ``ShareConsumer``s.

A member whose first decision blocks (on an event, with a bound) holds its records acquired: the
series and the console show them in flight, under its lock. Once it decides, its
acknowledgements are counted by type (REJECT every fifth offset, RELEASE the next one once, then
ACCEPT) and the share partition empties. A second group on the default 2 s lock holds its
records past the lock: the timeouts are counted, and its late acknowledgements fail.
``metrics.max.groups=1`` keeps one group's series and sums the other into ``__other__``.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

from .browser import browser  # noqa: F401 - the fixture
from .clients import create_topic
from .harness import BrokerProcess, free_port, wait_for
from .shares import Received, ShareMember
from .test_console_api import api
from .test_console_browser import count, texts, until
from .test_metrics import Samples, scrape, value
from .test_share_groups import (
    ACCEPT,
    REJECT,
    RELEASE,
    SETTINGS,
    earliest,
    produce,
    set_group_config,
)

RECORDS = 20
TOPIC = "t"


class GatedDecisions:
    """The member's decisions: the first one waits until :meth:`open` (at most 60 s); then
    every fifth offset is rejected, the one after it released once, the rest accepted."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.seen: Counter[int] = Counter()
        self.decided: Counter[int] = Counter()

    def open(self) -> None:
        self.gate.set()

    def __call__(self, record: Received) -> int:
        self.gate.wait(60)
        offset = record[2]
        self.seen[offset] += 1
        if offset % 5 == 0:
            kind = REJECT
        elif offset % 5 == 1 and self.seen[offset] == 1:
            kind = RELEASE
        else:
            kind = ACCEPT
        self.decided[kind] += 1
        return kind


def share_series(s: Samples, name: str) -> dict[tuple[str, str, str], float]:
    """One per-share-partition family: (group, topic, partition) -> value."""
    out = {}
    for (sample, labels), v in s.items():
        if sample == name:
            d = dict(labels)
            out[(d["group"], d["topic"], d["partition"])] = v
    return out


def scraped_once(broker: BrokerProcess, counter: str) -> Samples | None:
    """A scrape in which ``counter`` has counted something, else None."""
    s = scrape(broker)
    return s if (value(s, counter) or 0) > 0 else None


def test_share_metrics_and_console_json_follow_acquisition_and_acknowledgement(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(
        tmp_path / "data", {**SETTINGS, "metrics.max.groups": 1}, metrics_port=free_port()
    ).start()
    members: list[ShareMember] = []
    decisions = GatedDecisions()
    late = GatedDecisions()
    try:
        create_topic(broker.bootstrap, TOPIC, 1)
        earliest(broker, "g")
        set_group_config(broker, "g", share_record_lock_duration_ms="30000")
        produce(broker, TOPIC, RECORDS, 1)
        members.append(ShareMember(broker.bootstrap, "g", [TOPIC], "m", decide=decisions))

        # Held: acquired and in flight, one Stable group with one member.
        def holding() -> Samples | None:
            s = scrape(broker)
            acquired = share_series(s, "kcoord_share_partition_acquired_messages")
            return s if acquired.get(("g", TOPIC, "0"), 0) > 0 else None

        s = wait_for(holding, 60, what="records acquired in g")
        assert isinstance(s, dict)
        in_flight = share_series(s, "kcoord_share_partition_in_flight_messages")[("g", TOPIC, "0")]
        acquired = share_series(s, "kcoord_share_partition_acquired_messages")[("g", TOPIC, "0")]
        assert 0 < acquired <= in_flight <= RECORDS
        assert value(s, "kcoord_share_groups", state="Stable") == 1
        assert value(s, "kcoord_share_group_members", group="g") == 1
        assert value(s, "kcoord_share_partitions") == 1
        assert value(s, "kcoord_share_group_rebalances_total") >= 1  # type: ignore[operator]
        assert value(s, "kcoord_share_partition_load_seconds_count") == 1
        assert value(s, "kcoord_share_fetch_requests_total") >= 1  # type: ignore[operator]
        assert value(s, "kcoord_share_record_acknowledgements_total", ack_type="Accept") == 0

        # The console: the group listed as a share group, its page with the held records.
        status, listed = api(broker, "/api/groups")
        assert status == 200
        row = {g["group"]: g for g in listed["groups"]}["g"]
        assert (row["type"], row["state"], row["members"], row["protocol"]) == (
            "share", "Stable", 1, "simple"
        )
        status, page = api(broker, "/api/groups/g")
        assert status == 200 and page["type"] == "share"
        (member,) = page["members_detail"]
        assert member["assignment"] == {TOPIC: [0]} and member["epoch"] >= 1
        assert member["client_id"] and member["host"]
        (part,) = page["partitions"]
        assert (part["topic"], part["partition"], part["members"]) == (TOPIC, 0, [member["member_id"]])
        assert part["start_offset"] == 0 and part["log_end"] == RECORDS
        assert 0 < part["acquired"] <= part["in_flight"] <= part["end_offset"] <= RECORDS
        first = part["runs"][0]
        assert (first["first_offset"], first["state"], first["delivery_count"]) == (0, "ACQUIRED", 1)
        assert first["member_id"] == member["member_id"] and first["lock_deadline_ms"] > page["now_ms"]

        # Decided: every record done, the acknowledgements counted by type.
        decisions.open()
        wait_for(lambda: sum(decisions.decided.values()) >= RECORDS + RECORDS // 5, 60,
                 what="every record decided")  # fmt: skip

        def settled() -> Samples | None:
            s = scrape(broker)
            done = value(s, "kcoord_share_record_acknowledgements_total", ack_type="Accept") == 16
            empty = share_series(s, "kcoord_share_partition_in_flight_messages").get(("g", TOPIC, "0")) == 0
            return s if done and empty else None

        s = wait_for(settled, 60, what="16 accepted and nothing in flight")
        assert isinstance(s, dict)
        assert value(s, "kcoord_share_record_acknowledgements_total", ack_type="Reject") == 4
        assert value(s, "kcoord_share_record_acknowledgements_total", ack_type="Release") >= 4  # type: ignore[operator]
        assert share_series(s, "kcoord_share_partition_archived_messages_total")[("g", TOPIC, "0")] == 4
        assert value(s, "kcoord_share_acknowledgement_requests_total") >= 1  # type: ignore[operator]
        assert value(s, "kcoord_share_acknowledgement_requests_failed_total") == 0
        assert value(s, "kcoord_share_fetch_requests_failed_total") == 0
        assert value(s, "kcoord_share_coordinator_write_seconds_count") >= 1  # type: ignore[operator]
        status, page = api(broker, "/api/groups/g")
        (part,) = page["partitions"]
        assert (part["start_offset"], part["in_flight"], part["archived"], part["runs"]) == (
            RECORDS, 0, 4, []
        )
        assert part["acknowledged"] >= RECORDS + 4 and part["acks_per_second"] > 0
        assert part["lag"] == 0

        # A second group holds its records past the 2 s lock: timeouts counted, the late
        # acknowledgements refused; with metrics.max.groups=1 one group is summed in __other__.
        earliest(broker, "g2")
        members.append(ShareMember(broker.bootstrap, "g2", [TOPIC], "late", decide=late))
        wait_for(lambda: scraped_once(broker, "kcoord_share_acquisition_lock_timeouts_total"), 60,
                 what="lock timeouts in g2")  # fmt: skip
        late.open()
        s = wait_for(lambda: scraped_once(broker, "kcoord_share_acknowledgement_requests_failed_total"),
                     60, what="a late acknowledgement refused")  # fmt: skip
        assert isinstance(s, dict)
        named = {g for g, _, _ in share_series(s, "kcoord_share_partition_in_flight_messages")}
        assert len(named) == 2 and "__other__" in named and named - {"__other__"} <= {"g", "g2"}
        assert {dict(labels)["group"] for (n, labels) in s if n == "kcoord_share_group_members"} == named
        assert value(s, "kcoord_share_groups", state="Stable") == 2
    finally:
        decisions.open()
        late.open()
        for m in members:
            m.stop()
        broker.stop()


def test_the_share_group_page_renders_its_share_partitions(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    broker = BrokerProcess(tmp_path / "data", SETTINGS, metrics_port=free_port()).start()
    members: list[ShareMember] = []
    decisions = GatedDecisions()
    try:
        create_topic(broker.bootstrap, TOPIC, 2)
        earliest(broker, "q")
        set_group_config(broker, "q", share_record_lock_duration_ms="30000")
        produce(broker, TOPIC, RECORDS, 2)
        members.append(ShareMember(broker.bootstrap, "q", [TOPIC], "m", decide=decisions))
        browser.get(f"http://127.0.0.1:{broker.metrics_port}/#/groups")
        row = '#groups-table tr[data-group="q"]'
        until(browser, "q Stable on the groups page", lambda d: texts(d, row + " .state") == ["Stable"])
        assert texts(browser, row + " td")[1] == "share"
        browser.get(f"http://127.0.0.1:{broker.metrics_port}/#/group/q")
        until(browser, "the share group page", lambda d: texts(d, "#group-name") == ["q"], 30)
        until(browser, "a held run on the page",
              lambda d: count(d, '#in-flight-runs tr[data-state="ACQUIRED"]') >= 1, 60)  # fmt: skip
        assert count(browser, "#share-partitions tbody tr") == 2
        assert count(browser, "#members tbody tr") == 1
        decisions.open()
        until(browser, "both share partitions done",
              lambda d: texts(d, "#share-partitions .in-flight") == ["0", "0"]
              and texts(d, "#share-partitions .start-offset") == ["10", "10"], 60)  # fmt: skip
        assert texts(browser, "#share-partitions .archived") == ["2", "2"]
    finally:
        decisions.open()
        for m in members:
            m.stop()
        broker.stop()
