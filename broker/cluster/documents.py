"""The small stores other nodes change (cluster mode): topic configs, ACLs, SCRAM users.

Each is one document in the database, read whole at start-up and replaced whole by the node
that changes it. :class:`SharedDocuments` reads the watched documents at every round of the
member loop (a few small rows) and hands each one whose bytes changed since the last read to its
store (``stored_elsewhere``), so a change made on one node holds on every node within a
heartbeat: an ACL deleted on one node stops granting on all of them.

Two nodes changing the same document at once still write whole documents: the later write
wins, and a change the earlier one carried is lost (each node's own answer was "done").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kcoord.storage.engine import Documents

Apply = Callable[[bytes | None], None]


class SharedDocuments:
    def __init__(self, documents: Documents, stores: Mapping[str, Apply]) -> None:
        self.documents = documents
        self.stores = dict(stores)
        self._seen: dict[str, bytes | None] | None = None

    def read(self) -> dict[str, bytes | None]:
        """The watched documents as stored now (blocking; any thread)."""
        return {name: self.documents.read_document(name) for name in self.stores}

    def apply(self, now: dict[str, bytes | None]) -> list[str]:
        """Hand the documents that changed since the last read to their stores (the event
        loop); their names. The first read only records what start-up already loaded."""
        seen, self._seen = self._seen, now
        if seen is None:
            return []
        changed = [name for name, raw in now.items() if raw != seen.get(name)]
        for name in changed:
            self.stores[name](now[name])
        return changed
