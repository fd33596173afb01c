"""The members of a classic group of one, without a dict.

Most idle groups have one member (a consumer alone in its group), and a dict of one entry costs
about 200 bytes where this holds the id and the member in two slots (64 bytes).
:class:`coordinator.classic.group.ClassicGroup` keeps its members in one of these while it has
exactly one, in a dict when it has more, and in a shared empty mapping when it has none; it is
the only one to change them. A read-only mapping, read as the dict was: in insertion order.

Kept out of the compiled build: a native class cannot derive from ``Mapping``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")


class OneMember(Mapping[str, V], Generic[V]):
    """``{key: value}``, read-only."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: V) -> None:
        self.key = key
        self.value = value

    def __getitem__(self, key: str) -> V:
        if key == self.key:
            return self.value
        raise KeyError(key)

    def get(self, key: str, default: V | None = None) -> V | None:  # type: ignore[override]
        return self.value if key == self.key else default

    def __contains__(self, key: object) -> bool:
        return key == self.key

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[str]:
        return iter((self.key,))

    # Tuples rather than views: read as views are (iterated, counted, listed), at a fraction
    # of the cost of building a view over a Python mapping.
    def keys(self) -> tuple[str]:  # type: ignore[override]
        return (self.key,)

    def values(self) -> tuple[V]:  # type: ignore[override]
        return (self.value,)

    def items(self) -> tuple[tuple[str, V]]:  # type: ignore[override]
        return ((self.key, self.value),)

    def __repr__(self) -> str:
        return f"{{{self.key!r}: {self.value!r}}}"
