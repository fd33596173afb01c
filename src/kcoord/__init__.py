"""kcoord: a Kafka-wire-protocol broker whose heart is the consumer-group coordinator.

Every module lives under this package: ``kcoord.protocol`` (the wire format), ``kcoord.storage``
(partition logs), ``kcoord.coordinator`` (the group and transaction coordinators), ``kcoord.broker``
(the only I/O layer), ``kcoord.admin`` and ``kcoord.pipeline`` (the command-line tools and the
Spark jobs), ``kcoord.compiled`` (the mypyc build of the hot modules) and ``kcoord.cli`` (the
``kcoord`` command). In a checkout the subpackages are the repository's top-level folders, which
``src/kcoord/`` links in; an installed wheel holds them as plain folders.

:mod:`kcoord.compiled` is imported first: where a compiled build of the hot modules exists and is
current, its finder is in place before any of them is imported.
"""

from . import compiled  # noqa: F401  (first: see above)
