"""The errors of the ``__consumer_offsets`` record codecs, in a module of their own.

Both the classic codecs (``coordinator.schemas``) and the KIP-848 consumer-group codecs
(``coordinator.consumer.records``) raise them, and ``schemas`` imports ``consumer.records``;
keeping the classes here lets both import them without a cycle. ``coordinator.schemas``
re-exports them, so ``from coordinator.schemas import SchemaError`` keeps working.
"""

from __future__ import annotations

__all__ = ["SchemaError", "UnsupportedVersionError"]


class SchemaError(ValueError):
    """A key or value could not be decoded: malformed bytes or an unknown version."""


class UnsupportedVersionError(SchemaError):
    """A value (or a negative key) version the codecs do not know."""
