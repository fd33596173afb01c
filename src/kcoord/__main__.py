"""``python -m kcoord``: the ``kcoord`` command line."""

import sys

from kcoord.cli import main

sys.exit(main())
