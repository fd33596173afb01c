"""What the commands print: tables as kafka-consumer-groups.sh prints them, JSON, and notes;
and a reader that goes away (``| head``) ending a command quietly."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def quiet_when_pipe_closes(command: Callable[[], int]) -> int:
    """Run ``command``; if its reader went away (``kcoord topics describe T | head -1``), end
    quietly (no traceback, nothing on stderr) with status 1, as Python's documentation advises
    (a tool killed by SIGPIPE would end with 141)."""
    try:
        status = command()
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
        return status
    except BrokenPipeError:
        # What is still buffered goes nowhere, so that the interpreter's exit does not fail on
        # it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def note(text: str) -> None:
    print(text, file=sys.stderr)


def format_assignment(assignment: Iterable[tuple[str, int]]) -> str:
    """``topic(0,1),other(2)`` as kafka-consumer-groups.sh --members --verbose prints it."""
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment:
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))
