"""The transaction coordinator (KIP-98), sans-IO.

- ``model``: the per-transactional-id metadata and its states (Kafka's ids and names).
- ``records``: the ``__transaction_state`` record layout (TransactionLogKey / TransactionLogValue).
- ``coordinator``: the state machine. Every request becomes either an answer at once or a
  :class:`~coordinator.transactions.coordinator.Transition` that the runtime
  (``broker/txn/runtime.py``) makes durable before it is applied; markers are the runtime's job.
"""
