"""The small stores other nodes change (cluster mode): topic configs, ACLs, SCRAM users.

Each is one document in the database, read whole at start-up and replaced whole by the node
that changes it. :class:`SharedDocuments` reads the watched documents at every round of the
member loop (a few small rows) and hands each one whose bytes changed since the last read to its
store (``stored_elsewhere``), so a change made on one node holds on every node within a
heartbeat: an ACL deleted on one node stops granting on all of them.

A node changes a document only by :meth:`Documents.update_document` with its own operation as
a function of the document as stored (add these ACLs, delete those matching a filter, upsert a
credential, set a topic's config key): the engine applies it to the latest document under the
row's lock, so two nodes changing one document at once both keep their change, and each store
then takes the merged document it wrote. :class:`DocumentUpdates` runs a store's changes off
the event loop, one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from kcoord.storage.engine import DocumentChange, Documents

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


class DocumentUpdates:
    """One store's changes of its document (on one node or in a cluster): each is made by
    ``update_document`` in a worker thread, one at a time, and the document it leaves is handed
    to ``install`` on the event loop before the next change starts (so the store ends on the
    latest of its own writes). A change whose caller is cancelled (its client gone) still
    completes, install included."""

    def __init__(self, documents: Documents, name: str, install: Apply) -> None:
        self.documents = documents
        self.name = name
        self.install = install
        self._one_at_a_time = asyncio.Lock()
        self._running: set[asyncio.Task[None]] = set()

    async def update(self, change: DocumentChange) -> None:
        """Make the change durably and install the result; OSError if the document could not
        be written (nothing changed then), or what ``change`` raised."""
        task = asyncio.ensure_future(self._update(change))
        self._running.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._running.discard)
        await asyncio.shield(task)

    async def _update(self, change: DocumentChange) -> None:
        async with self._one_at_a_time:
            stored = await asyncio.to_thread(self.documents.update_document, self.name, change)
            self.install(stored)
