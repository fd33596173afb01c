"""One copy of the values that thousands of idle groups and members repeat.

A one-member group left alone holds little of its own: its member's protocols, timeouts and
assignment, its vote counts, the texts of its rebalance event and its settled state are mostly
the same as every other group's. :class:`SharingTable` keeps one copy of each such value per
key, bounded: a full table starts over, and what is still repeated comes back into it at once.
The values handed out are never changed in place, so sharing them changes no behaviour.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SharingTable(Generic[K, V]):
    """The shared value of each key, at most ``limit`` of them."""

    __slots__ = ("_limit", "_values")

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._values: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._values.get(key)

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` as the shared one of ``key`` (emptying a full table first); returns it."""
        values = self._values
        if len(values) >= self._limit:
            values.clear()
        values[key] = value
        return value


T = TypeVar("T", bound=Hashable)


def shared_copy(table: SharingTable[T, T], value: T) -> T:
    """The shared copy of a value that is its own key (bytes, ints, texts)."""
    found = table.get(value)
    return found if found is not None else table.put(value, value)
