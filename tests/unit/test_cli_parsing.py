"""The ``kcoord`` command line's pure parts: Kafka's flags parsed into the subcommand they name,
reset durations and CSV, kcat's format string, produce's line splitting, and help texts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kcoord.admin.cli import add_parsers
from kcoord.admin.consume import Record, format_record, parse_start, record_json
from kcoord.admin.group_flags import kafka_action
from kcoord.admin.groups import kafka_assignment
from kcoord.admin.offsets import check_reset_args, export_csv, parse_duration_ms, read_reset_file
from kcoord.admin.produce import parse_headers, split_lines
from kcoord.admin.topic_commands import parse_configs


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kcoord")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_kafka_form_names_the_subcommand() -> None:
    args = parse("groups", "--describe", "--group", "a", "--group", "b", "--members", "--verbose")
    kafka_action(args)
    assert (args.command, args.action, args.view) == ("groups", "describe", "members")
    assert args.group_flag == ["a", "b"] and args.verbose and args.kafka_layout

    args = parse("groups", "--reset-offsets", "--all-groups", "--all-topics", "--to-current",
                 "--dry-run", "--export")  # fmt: skip
    kafka_action(args)
    assert (args.command, args.action) == ("offsets", "reset")
    assert args.all_groups and args.all_topics and args.to_current and args.export
    assert not args.execute

    args = parse("groups", "--list", "--state", "Stable")
    kafka_action(args)
    assert (args.action, args.state, args.type) == ("list", "Stable", None)

    with pytest.raises(ValueError, match="exactly one action"):
        kafka_action(parse("groups", "--group", "g"))
    with pytest.raises(ValueError, match="one of --members"):
        kafka_action(parse("groups", "--describe", "--group", "g", "--members", "--state"))
    with pytest.raises(SystemExit):  # argparse: --dry-run and --execute exclude each other
        parse("groups", "--reset-offsets", "--group", "g", "--dry-run", "--execute")


def test_subcommands_take_group_flags_beside_positional_names() -> None:
    args = parse("groups", "describe", "--group", "g", "--members", "--verbose")
    assert (args.action, args.group, args.group_flag, args.view) == ("describe", [], ["g"], "members")
    args = parse("offsets", "reset", "g", "--topic", "t:0,1", "--by-duration", "PT5M", "--execute")
    assert (args.group, args.topic, args.by_duration, args.execute) == ("g", ["t:0,1"], "PT5M", True)


@pytest.mark.parametrize("scenario", [("--to-offset", "0"), ("--shift-by", "0"), ("--to-earliest",)])
def test_a_reset_scenario_of_zero_is_a_scenario(scenario: tuple[str, ...]) -> None:
    # 0 == False: a check for "given" that compared with False took --to-offset 0 for absent.
    check_reset_args(parse("offsets", "reset", "g", "--topic", "t", *scenario))
    with pytest.raises(ValueError, match="exactly one of"):
        check_reset_args(parse("offsets", "reset", "g", "--topic", "t"))


@pytest.mark.parametrize(
    ("text", "ms"),
    [("PT30M", 1_800_000), ("P1DT2H", 93_600_000), ("PT1.5S", 1500), ("pt10s", 10_000),
     ("-PT1H", -3_600_000), ("P2D", 172_800_000), ("PT-6H3M", -21_420_000)],
)  # fmt: skip
def test_durations_as_java_parses_them(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["1h", "P", "PT", "P1DT", "30M", "PT1H30", ""])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--by-duration"):
        parse_duration_ms(text)


def test_reset_csv_round_trip(tmp_path: Path) -> None:
    plans = {"g": {("t", 1): 5, ("t", 0): 3}, "h": {("u", 0): 0}}
    with_group = tmp_path / "all.csv"
    with_group.write_text(export_csv(plans, with_group=True))
    assert with_group.read_text() == "g,t,0,3\ng,t,1,5\nh,u,0,0\n"
    assert read_reset_file(str(with_group), ["g", "h"]) == plans
    one = tmp_path / "one.csv"
    one.write_text(export_csv({"g": plans["g"]}, with_group=False))
    assert one.read_text() == "t,0,3\nt,1,5\n"
    assert read_reset_file(str(one), ["g"]) == {"g": plans["g"]}
    with pytest.raises(ValueError, match="line 1"):  # no group column, several groups
        read_reset_file(str(one), ["g", "h"])
    bad = tmp_path / "bad.csv"
    bad.write_text("t,x,3\n")
    with pytest.raises(ValueError, match="must be numbers"):
        read_reset_file(str(bad), ["g"])
    with pytest.raises(ValueError, match="--from-file"):
        read_reset_file(str(tmp_path / "missing.csv"), ["g"])


RECORD = Record("t", 2, 41, 1700000000000, b"k", b"v\xff", (("a", b"1"), ("b", None)))


def test_kcat_format_string() -> None:
    assert format_record(r"%t[%p]@%o %k=%s %K/%S %T {%h} 100%%\n", RECORD) == (
        b"t[2]@41 k=v\xff 1/2 1700000000000 {a=1,b=} 100%\n"
    )
    nulls = Record("t", 0, 0, None, None, None)
    assert format_record(r"%k|%s|%K|%S|%T\t%x", nulls) == b"||-1|-1|-1\t%x"


def test_record_json_keeps_bytes_readable() -> None:
    assert record_json(RECORD) == {
        "topic": "t", "partition": 2, "offset": 41, "timestamp": 1700000000000, "key": "k",
        "value": "base64:dv8=", "headers": [["a", "1"], ["b", None]],
    }  # fmt: skip


def test_start_offsets() -> None:
    assert parse_start(None) == ("beginning", 0)
    assert parse_start("end") == ("end", 0)
    assert parse_start("12") == ("offset", 12)
    assert parse_start("-3") == ("tail", 3)
    with pytest.raises(ValueError, match="-o"):
        parse_start("stored")


def test_produce_lines_keys_and_headers() -> None:
    lines = [b"k1:v1\n", b"k2:v:2\r\n", b"nokey\n", b":empty-key\n", b"last"]
    assert list(split_lines(lines, b":")) == [
        (b"k1", b"v1"), (b"k2", b"v:2"), (None, b"nokey"), (b"", b"empty-key"), (None, b"last"),
    ]  # fmt: skip
    assert list(split_lines([b"a:b\n"], None)) == [(None, b"a:b")]
    assert parse_headers(["a=1", "b=x=y", "c="]) == [("a", b"1"), ("b", b"x=y"), ("c", b"")]
    with pytest.raises(ValueError, match="-H"):
        parse_headers(["nope"])


def test_topic_configs_and_assignments() -> None:
    assert parse_configs(["retention.ms=1000", " cleanup.policy =compact,delete"]) == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete",
    }  # fmt: skip
    with pytest.raises(ValueError, match="--config"):
        parse_configs(["retention.ms"])
    assert kafka_assignment((("t", 1), ("a", 0), ("t", 0))) == "a:0;t:0,1"
    assert kafka_assignment(()) == "-" and kafka_assignment(None) == "-"


def test_help_texts_are_plain(capsys: pytest.CaptureFixture[str]) -> None:
    """No reST markup in what ``--help`` prints."""
    from kcoord.cli import _parser

    for argv in (["--help"], ["groups", "--help"], ["topics", "--help"], ["consume", "--help"],
                 ["offsets", "reset", "--help"]):  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            _parser().parse_args(argv)
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert "usage: kcoord" in out and "``" not in out and ":func:" not in out, out
