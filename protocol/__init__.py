"""Kafka wire protocol, sans-IO: framing, headers, codecs, API versions, errors, record batches."""

import compiled  # noqa: F401  (first: where a compiled build exists, its modules load in place of ours)
