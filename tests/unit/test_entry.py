"""The process entry point (src/kcoord/entry.py): a ``kcoord serve`` process does not import
hypothesis (half a second of every broker start where it is installed), other commands do as
they always did. Each runs in a new interpreter, as the command does."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
sys.argv = ["kcoord", *sys.argv[1:]]
from kcoord.entry import main
status = main()
module = sys.modules.get("hypothesis")
print(status, "imported" if module is not None else "not imported")
"""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # a bad port: start-up stops (status 2) once the command line's modules are loaded
        (["serve", "--port", "70000", "--no-console"], "2 not imported"),
        (["config", "--json"], "0 imported"),
    ],
)
def test_only_serve_leaves_hypothesis_out(argv: list[str], expected: str, tmp_path: object) -> None:
    pytest.importorskip("hypothesis")  # installed with the test extras; kio imports it
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          timeout=60, cwd=str(tmp_path))
    assert done.stdout.strip().splitlines()[-1] == expected, done.stdout + done.stderr
