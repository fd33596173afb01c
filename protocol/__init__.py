"""Kafka wire protocol, sans-IO: framing, headers, codecs, API versions, errors, record batches."""
