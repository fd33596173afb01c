"""The console's pure parts: the CSRF check, the lag history's bounds, how bytes are shown,
the cluster page's partition ranges."""

from __future__ import annotations

from kcoord.broker.console.cluster_views import ranges
from kcoord.broker.console.csrf import Csrf
from kcoord.broker.console.history import MIN_INTERVAL_MS, LagHistory
from kcoord.broker.console.messages import shown_bytes


def test_a_post_needs_its_logins_token_and_this_server_as_origin() -> None:
    csrf = Csrf()
    token = csrf.token("Basic YWxpY2U6eA==")
    good = {"x-csrf-token": token, "host": "127.0.0.1:9308", "origin": "http://127.0.0.1:9308"}
    assert csrf.refusal("Basic YWxpY2U6eA==", good) is None
    assert csrf.refusal("Basic Ym9iOng=", good) is not None  # another login's token
    assert csrf.refusal("Basic YWxpY2U6eA==", {**good, "x-csrf-token": ""}) is not None
    assert csrf.refusal("Basic YWxpY2U6eA==", {**good, "origin": "http://evil:9308"}) is not None
    no_origin = {k: v for k, v in good.items() if k != "origin"}
    assert csrf.refusal("Basic YWxpY2U6eA==", no_origin) is not None
    referer = {**no_origin, "referer": "http://127.0.0.1:9308/#/group/g"}
    assert csrf.refusal("Basic YWxpY2U6eA==", referer) is None
    assert Csrf().token(None) != csrf.token(None)  # a key of its own at each start


def test_the_lag_history_is_bounded() -> None:
    history = LagHistory(samples=3, max_groups=2)
    for i in range(5):
        history.sample("a", i * MIN_INTERVAL_MS, i)
    history.sample("a", 4 * MIN_INTERVAL_MS + 1, 99)  # too soon after the last: not kept
    assert history.of("a") == [[2000, 2], [3000, 3], [4000, 4]]
    history.sample("b", 0, 1)
    history.sample("c", 0, 1)  # a third group: the one sampled longest ago goes
    assert history.of("a") == [] and history.of("b") == [[0, 1]]


def test_bytes_are_shown_as_text_json_and_hex_within_the_bound() -> None:
    assert shown_bytes(None, 10) is None
    shown = shown_bytes(b'{"a": 1}', 100)
    assert shown is not None and shown["json"] and shown["text"] == '{"a": 1}'
    binary = shown_bytes(b"\x00\xff", 100)
    assert binary is not None and binary["text"] is None and binary["hex"] == "00ff"
    cut = shown_bytes("é".encode() * 4, 5)  # a character cut in two at the bound
    assert cut is not None and cut["truncated"] and cut["text"] == "éé" and cut["size"] == 8
    assert not cut["json"]


def test_partitions_are_shown_as_compact_ranges() -> None:
    assert ranges([]) == ""
    assert ranges([4]) == "4"
    assert ranges([8, 0, 1, 2, 5, 7]) == "0-2,5,7-8"
