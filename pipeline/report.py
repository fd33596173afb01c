"""A static HTML page with PNG charts, written next to the tables (``<out>/report/``).

Charts: lag per group (messages, with the age of the oldest unconsumed record), rebalances per
group over time (cumulative classic group records and KIP-848 and share group epochs, the
groups with the most), the commit rate, and the share-partition start offsets (SPSO) over time.
Below them: problems (skipped segments), the most lagging partitions, each classic group's
latest generation, each consumer group's latest epoch, and per share group its share partitions,
how fast their start offsets advanced and how many records were archived.
Charts read with little data too: time axes tick in clock time (UTC) over at least a minute,
counts on whole numbers from zero, and a chart with nothing to show says so. Only small
aggregates are collected to the driver; matplotlib draws them with its
Agg backend (no display needed).
"""

from __future__ import annotations

import datetime as dt
import html
import io
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import fs

TOP_GROUPS = 25
REBALANCE_GROUPS = 8
SPSO_SERIES = 8  # share partitions drawn in the start offset chart
TABLE_ROWS = 20
_NICE_BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400, 604800)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _figure(width: float = 9.0, height: float = 4.0) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _age(ms: int) -> str:
    s = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.1f} s"


MIN_TIME_SPAN_S = 60
"""A time axis spans at least this much, so that its ticks land on whole seconds."""


def _time_axis(ax: Any, times: list[dt.datetime]) -> None:
    """Clock-time ticks (UTC): ``HH:MM:SS`` within a day, with the date in the axis label;
    ``MM-DD HH:MM`` beyond. A short span (one point, or a few seconds of data) is widened to
    MIN_TIME_SPAN_S around its middle instead of ticking in fractions of a second."""
    import matplotlib.dates as mdates

    lo, hi = min(times), max(times)
    span = (hi - lo).total_seconds()
    if span < MIN_TIME_SPAN_S:
        middle = lo + (hi - lo) / 2
        half = dt.timedelta(seconds=MIN_TIME_SPAN_S / 2)
        ax.set_xlim(middle - half, middle + half)
        span = MIN_TIME_SPAN_S
    locator = mdates.AutoDateLocator(tz=dt.UTC, minticks=3, maxticks=8)
    locator.intervald[mdates.SECONDLY] = [1, 5, 10, 15, 30]
    ax.xaxis.set_major_locator(locator)
    if span < 86400:
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=dt.UTC))
        days = sorted({t.astimezone(dt.UTC).date().isoformat() for t in (lo, hi)})
        ax.set_xlabel(f"time (UTC, {' to '.join(days)})")
    else:
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M", tz=dt.UTC))
        ax.set_xlabel("time (UTC)")


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def _note(ax: Any, text: str) -> None:
    """A remark over a chart whose data says little (everything at zero)."""
    ax.text(0.98, 0.95, text, ha="right", va="top", transform=ax.transAxes, color="gray")


def lag_figure(rows: list[dict[str, Any]]) -> Any:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure(9.0, max(2.5, 0.35 * len(rows) + 1.2))
    if not rows:
        _empty(ax, "no committed offsets with a topic log in this data directory")
    else:
        rows = list(reversed(rows))
        names = [r["group"] for r in rows]
        lags = [r["lag"] for r in rows]
        bars = ax.barh(names, lags, color="#d9534f")
        for bar, r in zip(bars, rows, strict=True):
            age = r["max_lag_ms"]
            label = f" {r['lag']:,}" + (f"  (oldest unconsumed: {_age(age)} old)" if age else "")
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=8)
        ax.set_xlabel("lag (messages), summed over the group's partitions")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        top = max(lags)
        if top <= 0:
            ax.set_xlim(0, 10)  # not -0.1..0.1: a lag is a count of messages
            _note(ax, "every group is caught up: no lag")
        else:
            ax.set_xlim(0, top * 1.6)  # room for the labels
    ax.set_title("Consumer lag per group")
    return fig


def lag_chart(rows: list[dict[str, Any]]) -> bytes:
    return _png(lag_figure(rows))


def rebalance_figure(series: dict[str, list[tuple[dt.datetime, int]]]) -> Any:
    fig, ax = _figure()
    points = [t for values in series.values() for t, _ in values]
    if not points:
        _empty(ax, "no group metadata or group epoch records")
    else:
        from matplotlib.ticker import MaxNLocator

        for group, values in series.items():
            times = [t for t, _ in values]
            counts = list(range(1, len(values) + 1))
            ax.step(times, counts, where="post", marker="o", label=group)
        ax.set_ylabel("generations / group epochs, cumulative")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, max(len(v) for v in series.values()) + 1)
        ax.legend(fontsize=8, loc="upper left")
        _time_axis(ax, points)
    ax.set_title("Rebalances per group over time")
    return fig


def rebalance_chart(series: dict[str, list[tuple[dt.datetime, int]]]) -> bytes:
    return _png(rebalance_figure(series))


def commit_rate_figure(points: list[tuple[dt.datetime, float]], bucket_s: int) -> Any:
    fig, ax = _figure()
    if not points:
        _empty(ax, "no offset commits")
    else:
        ax.plot([t for t, _ in points], [r for _, r in points], drawstyle="steps-post", color="#337ab7")
        ax.fill_between([t for t, _ in points], [r for _, r in points], step="post", alpha=0.2)
        ax.set_ylabel(f"commits per second ({bucket_s} s buckets)")
        ax.set_ylim(0, max(r for _, r in points) * 1.2 or 1)
        _time_axis(ax, [t for t, _ in points])
    ax.set_title("Offset commit rate")
    return fig


def commit_rate_chart(points: list[tuple[dt.datetime, float]], bucket_s: int) -> bytes:
    return _png(commit_rate_figure(points, bucket_s))


def start_offset_figure(series: dict[str, list[tuple[dt.datetime, int]]]) -> Any:
    fig, ax = _figure()
    points = [t for values in series.values() for t, _ in values]
    if not points:
        _empty(ax, "no share-group state records")
    else:
        from matplotlib.ticker import MaxNLocator

        for name, values in series.items():
            ax.step([t for t, _ in values], [o for _, o in values], where="post", marker=".", label=name)
        ax.set_ylabel("start offset (SPSO)")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="upper left")
        _time_axis(ax, points)
    ax.set_title("Share-partition start offsets over time")
    return fig


def start_offset_chart(series: dict[str, list[tuple[dt.datetime, int]]]) -> bytes:
    return _png(start_offset_figure(series))


def _bucket_seconds(span_ms: int, buckets: int = 60) -> int:
    want = max(span_ms / 1000 / buckets, 1)
    return next((b for b in _NICE_BUCKETS_S if b >= want), _NICE_BUCKETS_S[-1])


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "<p class=muted>none</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if r.get(c) is None else str(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:13px;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3} .muted{color:#888} .problem{background:#fdecea;border:1px solid #d9534f;
padding:0.5em 1em} img{max-width:100%;border:1px solid #eee;margin-bottom:1.5em}
"""


def write_report(spark: SparkSession, tables: dict[str, DataFrame], summary: Any) -> str:
    """Collect the aggregates, draw the charts, write ``report/index.html``; return its URI."""
    out_dir = fs.join(summary.out, "report")
    lag = tables["consumer_lag"]
    per_group = [
        r.asDict()
        for r in lag.where(F.col("lag").isNotNull())
        .groupBy("group")
        .agg(F.sum("lag").alias("lag"), F.max("lag_ms").alias("max_lag_ms"), F.count("*").alias("partitions"))
        .orderBy(F.desc("lag"), "group")
        .limit(TOP_GROUPS)
        .collect()
    ]

    gens = tables["group_generations"]
    epochs = tables["consumer_group_epochs"]
    share_epochs = tables["share_group_epochs"]
    history = gens.select("group", "time", "generation", "log_offset")
    for e in (epochs, share_epochs):
        history = history.unionByName(
            e.select("group", "time", F.col("group_epoch").alias("generation"), "log_offset")
        )
    busiest = [
        r["group"]
        for r in history.groupBy("group").count().orderBy(F.desc("count"), "group").limit(REBALANCE_GROUPS).collect()
    ]
    series: dict[str, list[tuple[dt.datetime, int]]] = {g: [] for g in busiest}
    for r in (
        history.where(F.col("group").isin(busiest)).select("group", "time", "generation")
        .orderBy("group", "log_offset").collect()
    ):
        # (a naive datetime from collect() is the driver's local time)
        series[r["group"]].append((r["time"].astimezone(dt.UTC), r["generation"]))

    commits = tables["offset_commits"]
    bounds = commits.agg(F.min("commit_timestamp").alias("lo"), F.max("commit_timestamp").alias("hi")).first()
    rate: list[tuple[dt.datetime, float]] = []
    bucket_s = 1
    if bounds is not None and bounds["lo"] is not None:
        bucket_s = _bucket_seconds(int(bounds["hi"]) - int(bounds["lo"]))
        width = bucket_s * 1000
        counts = (
            commits.groupBy(F.floor(F.col("commit_timestamp") / width).alias("b")).count().orderBy("b").collect()
        )
        for r in counts:
            start = dt.datetime.fromtimestamp(r["b"] * bucket_s, tz=dt.UTC)
            rate.append((start, r["count"] / bucket_s))
        if rate:  # close the last step
            rate.append((rate[-1][0] + dt.timedelta(seconds=bucket_s), rate[-1][1]))

    fs.write_bytes(fs.join(out_dir, "lag_per_group.png"), lag_chart(per_group))
    fs.write_bytes(fs.join(out_dir, "rebalances.png"), rebalance_chart(series))
    fs.write_bytes(fs.join(out_dir, "commit_rate.png"), commit_rate_chart(rate, bucket_s))
    fs.write_bytes(fs.join(out_dir, "share_start_offsets.png"),
                   start_offset_chart(_start_offset_series(tables["share_state_history"])))
    share_groups = _share_groups(tables["share_state_latest"], share_epochs)

    top_partitions = [
        r.asDict()
        for r in lag.where(F.col("lag") > 0).orderBy(F.desc("lag")).limit(TABLE_ROWS)
        .select("group", "topic", "partition", "committed_offset", "log_end_offset", "lag", "lag_ms").collect()
    ]
    latest_gen = [
        r.asDict()
        for r in gens.groupBy("group")
        .agg(F.max(F.struct("log_offset", "generation", "leader", "member_count", "protocol", "time")).alias("g"),
             F.count("*").alias("records"))
        .select("group", "g.generation", "g.protocol", "g.member_count", "g.leader", "g.time", "records")
        .orderBy("group").limit(200).collect()
    ]

    latest_epoch = [
        r.asDict()
        for r in epochs.groupBy("group")
        .agg(F.max(F.struct("log_offset", "group_epoch", "assignment_epoch", "member_count", "converged", "time"))
             .alias("e"), F.count("*").alias("epochs"))
        .select("group", "e.group_epoch", "e.assignment_epoch", "e.member_count", "e.converged", "e.time", "epochs")
        .orderBy("group").limit(200).collect()
    ]

    as_of = dt.datetime.fromtimestamp(summary.as_of_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    problems = "".join(
        f"<li><code>{html.escape(p['name'])}</code>: {html.escape(p['message'])}</li>" for p in summary.problems
    )
    problem_html = (
        f"<div class=problem><b>{len(summary.problems)} problem(s): these were skipped, so the "
        f"tables may be incomplete.</b><ul>{problems}</ul></div>"
        if summary.problems
        else "<p>No problems: every segment was read completely.</p>"
    )
    t = summary.totals
    # the job stores a PostgreSQL URL without its password
    where = "Database" if summary.data_dir.startswith("postgres") else "Data directory"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kcoord pipeline report</title><style>{_STYLE}</style></head>
<body>
<h1>Consumer groups: offsets, lag and rebalances</h1>
<p>{where} <code>{html.escape(summary.data_dir)}</code>, as of {as_of}.
{len(summary.segments)} segments read ({t.get('bytes', 0):,} bytes, {t.get('records', 0):,} records):
{t.get('offset_commits', 0):,} offset commits, {t.get('offset_tombstones', 0):,} offset tombstones,
{t.get('group_records', 0):,} group records, {t.get('group_tombstones', 0):,} group tombstones,
{t.get('consumer_group_records', 0):,} consumer group (KIP-848) records,
{t.get('share_group_records', 0):,} share group records; {t.get('share_snapshots', 0):,} share-state
snapshots and {t.get('share_updates', 0):,} updates.
Tables: {', '.join(f'<code>{n}</code> ({summary.rows.get(n, 0):,} rows)' for n in tables)}.</p>
{problem_html}
<h2>Lag per group</h2><img src="lag_per_group.png" alt="lag per group">
<h2>Rebalances per group</h2><img src="rebalances.png" alt="rebalances per group over time">
<h2>Commit rate</h2><img src="commit_rate.png" alt="offset commit rate">
<h2>Share groups</h2>
<p>Per share group: its share partitions, their start offsets' advance since the first state
record (offsets per second over that time), records whose delivery is complete past the start
offset, records available again after a delivery, and records archived (rejected, or past the
delivery limit) as the share-state log shows them.</p>
{_table(share_groups, ["group", "group_epoch", "members", "partitions", "start_offset_advance",
                       "start_offsets_per_s", "delivery_complete", "available", "archived"])}
<img src="share_start_offsets.png" alt="share-partition start offsets over time">
<h2>Most lagging partitions</h2>
{_table(top_partitions, ["group", "topic", "partition", "committed_offset", "log_end_offset", "lag", "lag_ms"])}
<h2>Latest generation per group</h2>
{_table(latest_gen, ["group", "generation", "protocol", "member_count", "leader", "time", "records"])}
<h2>Latest epoch per consumer group (KIP-848)</h2>
{_table(latest_epoch, ["group", "group_epoch", "assignment_epoch", "member_count", "converged", "time", "epochs"])}
</body></html>
"""
    index = fs.join(out_dir, "index.html")
    fs.write_bytes(index, page.encode())
    return index


def _start_offset_series(history: DataFrame) -> dict[str, list[tuple[dt.datetime, int]]]:
    """The SPSO over time of the share partitions with the most records (at most
    SPSO_SERIES), named ``group topic-partition``."""
    known = history.where(F.col("start_offset") >= 0)
    keys = ["group", "topic_id", "partition"]
    busiest = known.groupBy(*keys).count().orderBy(F.desc("count"), *keys).limit(SPSO_SERIES)
    series: dict[str, list[tuple[dt.datetime, int]]] = {}
    for r in (
        known.join(busiest, keys).orderBy(*keys, "log_offset")
        .select("group", F.coalesce("topic", "topic_id").alias("name"), "partition", "time",
                "start_offset").collect()
    ):
        # (a naive datetime from collect() is the driver's local time)
        name = f"{r['group']} {r['name']}-{r['partition']}"
        series.setdefault(name, []).append((r["time"].astimezone(dt.UTC), r["start_offset"]))
    return series


def _share_groups(latest: DataFrame, epochs: DataFrame) -> list[dict[str, Any]]:
    """One row per share group of ``share_state_latest``, with its latest epoch's members."""
    first_ms = F.unix_millis(F.col("first_start_time"))
    per_group = latest.groupBy("group").agg(
        F.count("*").alias("partitions"),
        F.sum("start_offset_advance").alias("start_offset_advance"),
        ((F.max(F.unix_millis(F.col("time"))) - F.min(first_ms)) / 1000).alias("seconds"),
        F.sum("delivery_complete_count").alias("delivery_complete"),
        F.sum("available_records").alias("available"),
        F.sum("archived_total").alias("archived"),
    )
    newest = epochs.groupBy("group").agg(
        F.max(F.struct("log_offset", "group_epoch", "member_count")).alias("e")
    ).select("group", F.col("e.group_epoch").alias("group_epoch"), F.col("e.member_count").alias("members"))
    rows = []
    for r in per_group.join(newest, "group", "left").orderBy("group").limit(200).collect():
        row = r.asDict()
        seconds = row.pop("seconds")
        advance = row["start_offset_advance"]
        row["start_offsets_per_s"] = (
            f"{advance / seconds:,.1f}" if seconds and advance is not None else None
        )
        rows.append(row)
    return rows
