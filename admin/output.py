"""What the commands print: tables as kafka-consumer-groups.sh prints them, JSON, and notes."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


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
