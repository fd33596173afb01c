"""``python -m kcoord.pipeline run ...`` or ``spark-submit pipeline/__main__.py run ...``."""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file by spark-submit: make the kcoord package importable
    # from a checkout (pipeline/, with the package in src/kcoord) or an install (kcoord/pipeline/)
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(os.path.dirname(_here), "src"), os.path.dirname(os.path.dirname(_here))]

from kcoord.pipeline.cli import add_parser, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kcoord-pipeline")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["pipeline", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
