"""The one error-code table: Kafka's error names and numeric codes.

kio already carries Kafka's full table as an IntEnum (``kio.schema.errors.ErrorCode``), and its
response dataclasses take members of it, so this module re-exports it under our name rather than
keeping a second copy that could drift.
"""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]
