"""The web console in headless Chromium against a real broker and real confluent-kafka
consumers: the groups page lists a Stable group with its members; a killed consumer (SIGKILL,
its own process) shows up on the open group page as a rebalance triggered by that member's
expiry, with no reload; the group page's lag in messages and seconds matches
``kcoord groups describe``; a screenshot of a timeline with several rebalances is taken, and
replaces ``docs/console-group.png`` (shown in docs/operating.md) when
``KCOORD_UPDATE_SCREENSHOT=1`` (otherwise a test run would change a tracked file).

Every wait is on a condition, with a bound.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from .browser import browser  # noqa: F401 - the fixture
from .clients import create_topic, produce_confluent
from .groups import ConfluentMember, settle, wait_balanced
from .harness import ROOT, BrokerProcess, free_port, wait_for
from .test_admin_cli import commit, kcoord_json, state_of
from .test_console_api import FAST, api

SCREENSHOT = ROOT / "docs" / "console-group.png"
UTC_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
MATRIX = ROOT / "tests" / "integration" / "scripts" / "matrix_consumer.py"


# The page redraws on every poll, so elements are read in one script call (never held across a
# redraw) and clicks are retried on a stale element.
def texts(driver: Any, css: str) -> list[str]:
    script = "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent);"
    return list(driver.execute_script(script, css))


def attrs(driver: Any, css: str, name: str) -> list[str | None]:
    script = "return Array.from(document.querySelectorAll(arguments[0]), e => e.getAttribute(arguments[1]));"
    return list(driver.execute_script(script, css, name))


def hrefs(driver: Any, css: str) -> list[str]:
    """The links' resolved addresses."""
    return list(driver.execute_script("return Array.from(document.querySelectorAll(arguments[0]), e => e.href);", css))


def count(driver: Any, css: str) -> int:
    return int(driver.execute_script("return document.querySelectorAll(arguments[0]).length;", css))


def click(driver: Any, css: str) -> None:
    def once(d: Any) -> bool:
        d.find_element(By.CSS_SELECTOR, css).click()
        return True

    until(driver, f"a click on {css}", once)


def set_filter(driver: Any, text: str) -> None:
    """What typing into the filter box does: its value changes and an input event fires."""
    driver.execute_script(
        "const f = document.getElementById('filter'); f.value = arguments[0];"
        "f.dispatchEvent(new Event('input', {bubbles: true}));",
        text,
    )


def until(driver: Any, what: str, cond: Any, timeout: float = 20) -> Any:
    return WebDriverWait(
        driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    ).until(lambda d: cond(d), message=f"waited {timeout} s for {what}")


def kill_me_consumer(
    broker: BrokerProcess, group: str, topic: str, out: Path, session_ms: int = 3000
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(MATRIX), "--client", "confluent", "--bootstrap", broker.bootstrap,
         "--group", group, "--topic", topic, "--assignor", "range", "--out", str(out),
         "--session-ms", str(session_ms)],
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )  # fmt: skip


def test_groups_page_then_a_killed_member_on_the_timeline(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    broker = BrokerProcess(tmp_path / "data", FAST, metrics_port=free_port()).start()
    members: list[ConfluentMember] = []
    victim: subprocess.Popen[str] | None = None
    url = f"http://127.0.0.1:{broker.metrics_port}/"
    try:
        create_topic(broker.bootstrap, "orders", 4)
        members = [ConfluentMember(broker.bootstrap, "shop", "orders", "m0")]
        wait_balanced(members, 4)
        victim = kill_me_consumer(broker, "shop", "orders", tmp_path / "victim.out")
        wait_for(lambda: len(members[0].assignment) == 2, 60, what="the group split in two")
        wait_for(lambda: state_of(broker, "shop") == ("Stable", 2), 30, what="Stable with 2")

        # the groups page lists the Stable group with its members
        browser.get(url)
        row = '#groups-table tr[data-group="shop"]'
        until(browser, "shop Stable on the groups page",
              lambda d: texts(d, row + " .state") == ["Stable"] and texts(d, row + " .members") == ["2"])  # fmt: skip
        assert "classic" in texts(browser, row)[0]

        # the group page, open while the consumer is killed
        click(browser, row + " a")
        until(browser, "the group page", lambda d: texts(d, "#group-name") == ["shop"])
        until(browser, "two members", lambda d: count(d, "#members tbody tr") == 2)
        [victim_id] = [
            m["member_id"]
            for m in api(broker, "/api/groups/shop")[1]["members_detail"]
            if m["client_id"] == "rdkafka"
        ]
        browser.execute_script("window.notReloaded = true;")
        expired = f'#timeline g.event[data-trigger="member_expired"][data-member="{victim_id}"]'
        assert count(browser, expired) == 0
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed = time.monotonic()
        until(
            browser,
            "the expiry on the timeline",
            lambda d: count(d, expired),
            timeout=30,
        )
        seen_after = time.monotonic() - killed
        assert browser.execute_script("return window.notReloaded === true;")
        until(
            browser,
            "one member left",
            lambda d: count(d, "#members tbody tr") == 1,
        )
        [event] = texts(browser, expired)
        assert "member_expired" in event and "2→1 members" in event
        # session 3 s, poll 2 s: the expiry is on screen a few seconds after the kill
        print(f"expiry on the timeline {seen_after:.1f} s after SIGKILL")

        # more rebalances for the screenshot: a member joins, then leaves cleanly
        joiner = ConfluentMember(broker.bootstrap, "shop", "orders", "m2")
        members.append(joiner)
        wait_for(lambda: len(joiner.assignment) == 2, 60, what="m2 gets its share")
        joined = '#timeline g.event[data-trigger="member_joined"]'
        until(browser, "m2's join", lambda d: count(d, joined) == 3)
        joiner.stop()
        members.remove(joiner)
        left = '#timeline g.event[data-trigger="member_left"]'
        until(browser, "m2's leave", lambda d: count(d, left) == 1)
        triggers = attrs(browser, "#timeline g.event", "data-trigger")
        assert len(triggers) >= 4 and {"member_joined", "member_expired", "member_left"} <= set(
            triggers
        )
        # times in one format, with the zone; the rebalance table fits a 1400 px window
        start_cells = texts(browser, "#rebalances tbody tr td:first-child")
        assert start_cells and all(UTC_TIME.fullmatch(t) for t in start_cells), start_cells
        until(browser, "the status time", lambda d: UTC_TIME.search(texts(d, "#status")[0]))
        assert browser.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"
        ), "the group page is wider than the window"
        shot = tmp_path / SCREENSHOT.name
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        if os.environ.get("KCOORD_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(shot, SCREENSHOT)
    finally:
        if victim is not None and victim.poll() is None:
            victim.kill()
            victim.wait(10)
        for m in members:
            m.stop()
        broker.stop()


def test_group_page_lag_matches_kcoord_groups_describe(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    broker = BrokerProcess(tmp_path / "data", FAST, metrics_port=free_port()).start()
    members: list[ConfluentMember] = []
    try:
        create_topic(broker.bootstrap, "orders", 3)
        before = time.time()
        produce_confluent(
            broker.bootstrap,
            "orders",
            [(p, b"k", b"v") for p in range(3) for _ in range(10)],
            "none",
        )
        commit(broker.bootstrap, "billing", {("orders", 0): 4, ("orders", 1): 10, ("orders", 2): 7})
        members = [
            ConfluentMember(broker.bootstrap, "billing", "orders", f"m{i}") for i in range(2)
        ]
        wait_balanced(members, 3)
        settle(members)
        browser.get(f"http://127.0.0.1:{broker.metrics_port}/#/group/billing")
        until(
            browser,
            "three partitions",
            lambda d: count(d, "#partitions tbody tr") == 3,
        )
        described = kcoord_json(broker, "groups", "describe", "billing")
        for row in described:
            tr = f'#partitions tr[data-topic="orders"][data-partition="{row["partition"]}"]'
            assert texts(browser, tr + " .lag") == [str(row["lag"])], row
            assert texts(browser, tr + " .committed") == [str(row["current_offset"])]
            assert texts(browser, tr + " .log-end") == [str(row["log_end_offset"])]
            [seconds] = attrs(browser, tr + " .lag-seconds", "data-seconds")
            assert seconds is not None and seconds != ""
            [shown] = texts(browser, tr + " .lag-seconds")
            assert shown.endswith(" s") and abs(float(shown[:-2]) - float(seconds)) <= 0.5
            age = time.time() - before
            if row["lag"] == 0:
                assert float(seconds) == 0.0
            else:  # the oldest unconsumed record was produced after `before`
                assert 0 <= float(seconds) <= age + 1, (row, seconds)
        # the groups page sums the same lag
        browser.get(f"http://127.0.0.1:{broker.metrics_port}/#/groups")
        total = sum(r["lag"] for r in described)
        until(
            browser,
            "the group's total lag",
            lambda d: texts(d, '#groups-table tr[data-group="billing"] .lag') == [str(total)],
        )
        assert json.loads(json.dumps(total)) == 6 + 0 + 3
    finally:
        for m in members:
            m.stop()
        broker.stop()


def readers(broker: BrokerProcess, topic: str) -> list[list[str]]:
    [found] = [t for t in api(broker, "/api/topics?q=" + topic)[1]["topics"] if t["topic"] == topic]
    return [p["groups"] for p in found["partitions"]]


def test_stuck_flag_kip848_groups_and_the_topics_page(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    broker = BrokerProcess(tmp_path / "data", FAST, metrics_port=free_port()).start()
    members: list[ConfluentMember] = []
    sleeper: subprocess.Popen[str] | None = None
    url = f"http://127.0.0.1:{broker.metrics_port}/"
    try:
        create_topic(broker.bootstrap, "orders", 2)
        produce_confluent(
            broker.bootstrap,
            "orders",
            [(p, b"k", b"v") for p in range(2) for _ in range(5)],
            "none",
        )
        # a member that will stop answering (SIGSTOP) with a 20 s session: the rebalance a
        # newcomer starts waits for it that long
        out = tmp_path / "sleeper.out"
        sleeper = kill_me_consumer(broker, "slow", "orders", out, session_ms=20_000)
        wait_for(
            lambda: out.exists() and len(out.read_text().splitlines()) == 10,
            60,
            what="sleeper consumed",
        )
        wait_for(lambda: state_of(broker, "slow") == ("Stable", 1), 30, what="slow Stable")
        wait_for(
            lambda: readers(broker, "orders") == [["slow"], ["slow"]], 30, what="slow's commits"
        )
        kip = ConfluentMember(
            broker.bootstrap, "kip", "orders", "k0", assignor="uniform", protocol="consumer"
        )
        members.append(kip)
        wait_balanced([kip], 2)

        browser.get(url + "?stuck_ms=300")
        kip_row = '#groups-table tr[data-group="kip"]'
        until(
            browser,
            "the KIP-848 group, Stable",
            lambda d: texts(d, kip_row + " .state") == ["Stable"],
        )
        assert "consumer" in texts(browser, kip_row)[0] and "uniform" in texts(browser, kip_row)[0]

        sleeper.send_signal(signal.SIGSTOP)
        members.append(ConfluentMember(broker.bootstrap, "slow", "orders", "j0"))
        slow_row = '#groups-table tr[data-group="slow"]'
        rows = "#groups-table tbody tr"
        until(browser, "slow flagged as stuck", lambda d: count(d, slow_row + ".stuck") == 1)
        assert "stuck rebalancing" in texts(browser, slow_row + " .flag")[0]
        assert texts(browser, slow_row + " .state") == ["PreparingRebalance"]
        click(browser, "#stuck-filter")
        until(browser, "stuck only", lambda d: attrs(d, rows, "data-group") == ["slow"])
        click(browser, "#stuck-filter")
        until(browser, "all again", lambda d: attrs(d, rows, "data-group") == ["kip", "slow"])
        # once the sleeper's session expires the rebalance completes and the flag goes
        until(
            browser,
            "slow no longer stuck",
            lambda d: texts(d, slow_row + " .state") == ["Stable"],
            timeout=60,
        )
        assert count(browser, slow_row + ".stuck") == 0

        # filtering and sorting on the page
        set_filter(browser, "ki")
        until(browser, "the filter", lambda d: attrs(d, rows, "data-group") == ["kip"])
        set_filter(browser, "")
        click(browser, 'th[data-key="group"]')  # sorted by group already: now descending
        until(browser, "the sort", lambda d: attrs(d, rows, "data-group") == ["slow", "kip"])

        # the topics page: one row per topic, its partitions (offsets, groups) when expanded
        click(browser, "#nav-topics")
        topic_row = '#topics-table tr.topic[data-topic="orders"]'
        until(browser, "the topics page", lambda d: count(d, topic_row) == 1)
        assert hrefs(browser, topic_row + " td.groups a") == [url + "?stuck_ms=300#/group/slow"]
        assert texts(browser, topic_row + " td.groups a") == ["slow"]
        click(browser, topic_row + " button.expand")
        row = '#topics-table tr.partition[data-topic="orders"][data-partition="0"]'
        until(browser, "the partitions", lambda d: count(d, row) == 1)
        assert hrefs(browser, row + " td.groups a") == [url + "?stuck_ms=300#/group/slow"]
        assert texts(browser, row + " td.groups")[0] == "slow"  # a link, not ",http://..."
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait(10)
        for m in members:
            m.stop()
        broker.stop()


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as AdminClient's OffsetFetch answers them."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
    return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions if tp.offset >= 0}


def test_topics_page_message_browser_and_group_actions(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    broker = BrokerProcess(tmp_path / "data", FAST, metrics_port=free_port()).start()
    url = f"http://127.0.0.1:{broker.metrics_port}/"
    try:
        create_topic(broker.bootstrap, "orders", 2)
        records = [(0, b"k%d" % i, json.dumps({"item": "book", "n": i}).encode()) for i in range(5)]
        produce_confluent(broker.bootstrap, "orders", [*records, (1, None, b"\x00\xff")], "none")
        commit(broker.bootstrap, "billing", {("orders", 0): 1, ("orders", 1): 0})
        commit(broker.bootstrap, "doomed", {("orders", 0): 2})

        # topics: internal ones folded, __consumer_offsets one row when shown
        browser.get(url + "#/topics")
        row = '#topics-table tr.topic[data-topic="orders"]'
        until(browser, "the topics page", lambda d: count(d, row) == 1)
        assert count(browser, '#topics-table tr[data-topic="__consumer_offsets"]') == 0
        assert hrefs(browser, row + " td.groups a") == [url + "#/group/billing", url + "#/group/doomed"]
        click(browser, "#internal-toggle")
        until(browser, "internal topics", lambda d: count(d, '#topics-table tr[data-topic="__consumer_offsets"]') == 1)

        # the message browser: keys, values as JSON, text or hex
        click(browser, row + " a.browse")
        until(browser, "the newest messages", lambda d: count(d, "#messages tbody tr") == 5)
        first = '#messages tr[data-offset="0"]'
        assert texts(browser, first + " .key") == ["k0"]
        [shown] = texts(browser, first + " .value pre.json")
        assert json.loads(shown) == {"item": "book", "n": 0} and "\n" in shown  # pretty-printed
        assert UTC_TIME.fullmatch(texts(browser, first + " .timestamp")[0])
        assert texts(browser, first + " .ts-type") == ["CreateTime"]
        browser.execute_script("const f = document.getElementById('msg-format'); f.value = 'hex';"
                               "f.dispatchEvent(new Event('change'));")  # fmt: skip
        until(browser, "hex", lambda d: texts(d, first + " .key code.hex") == ["6b 30"])
        browser.execute_script("document.getElementById('msg-mode').value = 'offset';"
                               "document.getElementById('msg-value').value = '3';")  # fmt: skip
        click(browser, "#msg-load")
        until(browser, "from offset 3", lambda d: attrs(d, "#messages tbody tr", "data-offset") == ["3", "4"])
        browser.execute_script("document.getElementById('msg-partition').value = '1';"
                               "document.getElementById('msg-value').value = '0';")  # fmt: skip
        click(browser, "#msg-load")
        until(browser, "partition 1", lambda d: texts(d, "#messages tbody tr .value") == ["00 ff"])

        # reset: the dry run shows the new offsets and changes nothing; the confirmation does
        browser.get(url + "#/group/billing")
        until(browser, "the actions", lambda d: count(d, "#reset-preview") == 1)
        until(browser, "the sparkline", lambda d: count(d, "#lag-sparkline polyline") == 1)
        browser.execute_script("document.getElementById('reset-to').value = 'offset';"
                               "document.getElementById('reset-value').value = '3';")  # fmt: skip
        click(browser, "#reset-preview")
        plan = '#reset-plan tr[data-topic="orders"]'
        until(browser, "the dry run", lambda d: count(d, plan) == 2)
        assert texts(browser, plan + '[data-partition="0"] .current') == ["1"]
        assert texts(browser, plan + '[data-partition="0"] .new') == ["3"]
        assert texts(browser, plan + '[data-partition="1"] .new') == ["1"]  # kept within the log
        assert committed_offsets(broker.bootstrap, "billing") == {("orders", 0): 1, ("orders", 1): 0}
        click(browser, "#reset-confirm")
        until(browser, "the reset", lambda d: count(d, "#reset-done tbody tr") == 2)
        assert texts(browser, "#reset-done .error") == ["NONE", "NONE"]
        assert committed_offsets(broker.bootstrap, "billing") == {("orders", 0): 3, ("orders", 1): 1}

        # delete a group, confirmed
        browser.get(url + "#/group/doomed")
        until(browser, "doomed's page", lambda d: count(d, "#delete-group") == 1)
        click(browser, "#delete-group")
        click(browser, "#delete-group-confirm")
        until(browser, "deleted", lambda d: "deleted" in texts(d, "#action-message")[0])
        assert api(broker, "/api/groups/doomed")[0] == 404
        assert committed_offsets(broker.bootstrap, "doomed") == {}
    finally:
        broker.stop()
