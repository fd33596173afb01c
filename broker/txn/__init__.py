"""Transactions: the transaction coordinator's runtime and APIs, markers, producer ids, and what
transactions mean for the data plane (read_committed, the last stable offset)."""
