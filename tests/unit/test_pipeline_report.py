"""The pipeline report's charts with little data (issue 19): a lag of 0 does not draw an axis
from -0.1 to 0.1, time axes tick in clock time, never in fractions of a second, and empty
charts say why."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pyspark")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

from kcoord.pipeline.report import (  # noqa: E402
    commit_rate_chart,
    commit_rate_figure,
    lag_figure,
    rebalance_figure,
)

T0 = dt.datetime(2026, 11, 24, 3, 0, 3, 950_000, tzinfo=dt.UTC)
CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")


def _drawn(fig: Any) -> Any:
    FigureCanvasAgg(fig).draw()
    return fig.axes[0]


def _labels(ticks: Any) -> list[str]:
    return [t.get_text() for t in ticks if t.get_text()]


def _texts(ax: Any) -> str:
    return " ".join(t.get_text() for t in ax.texts)


def test_a_lag_of_zero_is_drawn_from_zero_in_whole_messages() -> None:
    ax = _drawn(lag_figure([{"group": "g", "lag": 0, "max_lag_ms": None, "partitions": 1}]))
    low, high = ax.get_xlim()
    assert low == 0 and high >= 1
    assert all(float(x).is_integer() for x in ax.get_xticks())
    assert "caught up" in _texts(ax)


def test_a_small_lag_ticks_on_whole_numbers() -> None:
    ax = _drawn(lag_figure([{"group": "g", "lag": 3, "max_lag_ms": 1500, "partitions": 1}]))
    assert ax.get_xlim()[0] == 0
    assert all(float(x).is_integer() for x in ax.get_xticks())


@pytest.mark.parametrize("span_s", [0, 0.05, 2, 50])
def test_short_time_spans_tick_in_clock_time(span_s: float) -> None:
    times = [T0, T0 + dt.timedelta(seconds=span_s)]
    ax = _drawn(rebalance_figure({"g": [(t, i + 1) for i, t in enumerate(times)]}))
    labels = _labels(ax.get_xticklabels())
    assert len(labels) >= 2 and all(CLOCK.match(x) for x in labels), labels
    assert "2026-11-24" in ax.get_xlabel() and "UTC" in ax.get_xlabel()
    assert ax.get_ylim()[0] == 0


def test_a_single_commit_bucket_is_readable() -> None:
    points = [(T0, 2.0), (T0 + dt.timedelta(seconds=1), 2.0)]
    ax = _drawn(commit_rate_figure(points, 1))
    labels = _labels(ax.get_xticklabels())
    assert labels and all(CLOCK.match(x) for x in labels), labels
    assert ax.get_ylim() == (0, pytest.approx(2.4))


def test_long_spans_show_the_date() -> None:
    times = [T0, T0 + dt.timedelta(days=3)]
    ax = _drawn(rebalance_figure({"g": [(t, i + 1) for i, t in enumerate(times)]}))
    assert all(re.match(r"^\d\d-\d\d \d\d:\d\d$", x) for x in _labels(ax.get_xticklabels()))


def test_charts_with_nothing_to_show_say_so() -> None:
    assert "no group metadata or group epoch records" in _texts(_drawn(rebalance_figure({})))
    assert "no committed offsets" in _texts(_drawn(lag_figure([])))
    assert commit_rate_chart([], 1).startswith(b"\x89PNG")
