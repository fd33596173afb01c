"""``python -m kcoord``: the ``kcoord`` command line."""

import sys

from kcoord.entry import main

sys.exit(main())
