"""The ``kcoord`` process's entry point (the console script and ``python -m kcoord``): what must
happen before the command line's modules are imported.

A broker process (``kcoord serve``) never uses hypothesis, but kio's protocol types import it
whenever it is installed (to register strategies for property tests), and that costs about half
a second of every start, a third of the whole start on a two-core machine: in the test suite's
venv, in any developer's venv with hypothesis, for every broker kcoord.testing starts. So for
``serve`` the import is made to fail (kio then registers nothing), before anything imports kio.
The admin and client commands (``kcoord groups``, ``topics``, ``produce``...: :data:`ADMIN_COMMANDS`)
never use it either, and are run without the broker's modules (:func:`kcoord.admin.cli.main`):
a ``kcoord topics list`` starts in a fraction of a second. Other commands, and anything that
imports kcoord as a library, are left as they are.
"""

from __future__ import annotations

import sys

from kcoord.admin import COMMANDS as ADMIN_COMMANDS


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in ("serve", *ADMIN_COMMANDS) and "hypothesis" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # an import of it fails
    if command in ADMIN_COMMANDS:
        from kcoord.admin.cli import main as run_admin

        return run_admin(sys.argv[1:])
    from kcoord.cli import main as run

    return run()
