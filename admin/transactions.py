"""``kcoord transactions list|describe|abort`` (KIP-664's kafka-transactions.sh, over the wire).

confluent-kafka's AdminClient has no transaction calls, so these speak the protocol themselves
(``client.exchange``): ListTransactions to the bootstrap broker (kcoord is one node),
FindCoordinator (key type TRANSACTION) and then DescribeTransactions to the coordinator.

``abort`` aborts a hanging transaction through the transaction coordinator: an InitProducerId
for the transactional id (WRITE on it is needed) bumps the producer epoch, which fences the
producer and has the coordinator abort its ongoing transaction and write the ABORT markers;
the command then waits until the transaction is complete.
"""

from __future__ import annotations

import argparse
import struct
import time
from typing import Any

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .client import Admin, AdminError, exchange, exchange_raw
from .output import note, print_json, print_table
from .security import connect

_TRANSACTION_KEY = 1
_IN_PROGRESS = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def _bootstrap(admin: Admin) -> tuple[str, int]:
    first = admin.bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host.strip("[]") or "localhost", int(port)


def _request(admin: Admin, where: tuple[str, int], api: int, version: int, **fields: Any) -> Any:
    try:
        with connect(where[0], where[1], admin.timeout, admin.security, exchange) as sock:
            return exchange(sock, api, version, fields)
    except (OSError, ConnectionError) as e:
        raise AdminError(f"broker {where[0]}:{where[1]}: {e}") from None


def _coordinator(admin: Admin, txn_id: str) -> tuple[int, str, int]:
    r = _request(admin, _bootstrap(admin), ApiKey.FIND_COORDINATOR, 4,
                 key_type=_TRANSACTION_KEY, coordinator_keys=[txn_id])
    c = r.coordinators[0]
    if c.error_code:
        raise AdminError(f"no coordinator for transactional id {txn_id!r}: "
                         f"{ErrorCode(c.error_code).name.upper()}")
    return int(c.node_id), c.host, int(c.port)


class _Reader:
    """Just enough of the flexible encoding to read a DescribeTransactions v0 answer by hand:
    kio refuses its start time of -1 (no transaction yet), which Kafka sends too."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1
        text = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return text

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def parse_describe_transactions(frame: bytes) -> list[dict[str, Any]]:
    """The transaction states of a DescribeTransactions v0 response frame (header included)."""
    r = _Reader(frame, 4)  # after the correlation id
    r.tags()
    r.fixed(">i")  # throttle time
    states = []
    for _ in range(r.uvarint() - 1):
        state: dict[str, Any] = {
            "error_code": r.fixed(">h"),
            "transactional_id": r.string(),
            "state": r.string(),
            "timeout_ms": r.fixed(">i"),
            "start_time_ms": r.fixed(">q"),
            "producer_id": r.fixed(">q"),
            "producer_epoch": r.fixed(">h"),
        }
        partitions = []
        for _ in range(r.uvarint() - 1):
            topic = r.string()
            partitions += [f"{topic}-{r.fixed('>i')}" for _ in range(r.uvarint() - 1)]
            r.tags()
        state["partitions"] = partitions
        r.tags()
        states.append(state)
    return states


def describe(admin: Admin, txn_id: str) -> dict[str, Any]:
    node, host, port = _coordinator(admin, txn_id)
    try:
        with connect(host, port, admin.timeout, admin.security, exchange) as sock:
            frame = exchange_raw(sock, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                                 {"transactional_ids": [txn_id]})
    except (OSError, ConnectionError) as e:
        raise AdminError(f"broker {host}:{port}: {e}") from None
    s = parse_describe_transactions(frame)[0]
    if s["error_code"]:
        raise AdminError(f"transactional id {txn_id!r}: {ErrorCode(s['error_code']).name.upper()}")
    del s["error_code"]
    start = s["start_time_ms"]
    s["duration_ms"] = int(time.time() * 1000) - start if start >= 0 else None
    return {"coordinator_id": node, **s}


def transactions_list(admin: Admin, args: argparse.Namespace) -> int:
    r = _request(admin, _bootstrap(admin), ApiKey.LIST_TRANSACTIONS, 1,
                 state_filters=args.state or [], producer_id_filters=args.producer_id or [],
                 duration_filter=args.duration_ms if args.duration_ms is not None else -1)
    if r.error_code:
        raise AdminError(f"ListTransactions: {ErrorCode(r.error_code).name.upper()}")
    for unknown in r.unknown_state_filters:
        note(f"unknown state {unknown!r} (Empty, Ongoing, PrepareCommit, PrepareAbort, "
             "CompleteCommit, CompleteAbort)")
    rows = sorted(
        (s.transactional_id, int(s.producer_id), s.transaction_state) for s in r.transaction_states
    )
    if args.json:
        print_json([{"transactional_id": t, "producer_id": p, "state": s} for t, p, s in rows])
    else:
        print_table(["TransactionalId", "ProducerId", "TransactionState"], rows)
    return 0


def _print(d: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(d)
        return
    print_table(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
         "TopicPartitions"],
        [[d["coordinator_id"], d["transactional_id"], d["producer_id"], d["producer_epoch"],
          d["state"], d["timeout_ms"], d["start_time_ms"] if d["start_time_ms"] >= 0 else None,
          d["duration_ms"], ",".join(d["partitions"]) or None]],
    )


def transactions_describe(admin: Admin, args: argparse.Namespace) -> int:
    _print(describe(admin, args.transactional_id), args.json)
    return 0


def transactions_abort(admin: Admin, args: argparse.Namespace) -> int:
    txn_id = args.transactional_id
    before = describe(admin, txn_id)
    if before["state"] not in _IN_PROGRESS:
        raise AdminError(f"transactional id {txn_id!r} has no transaction to abort "
                         f"(state {before['state']})")
    if before["state"] == "Ongoing":
        _node, host, port = _coordinator(admin, txn_id)
        r = _request(admin, (host, port), ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn_id,
                     transaction_timeout=before["timeout_ms"], producer_id=-1, producer_epoch=-1)
        if r.error_code not in (0, ErrorCode.concurrent_transactions):
            raise AdminError(f"aborting {txn_id!r}: {ErrorCode(r.error_code).name.upper()}")
    deadline = time.monotonic() + admin.timeout
    while True:
        after = describe(admin, txn_id)
        if after["state"] not in _IN_PROGRESS:
            break
        if time.monotonic() > deadline:
            raise AdminError(f"{txn_id!r} still {after['state']} after {admin.timeout:g} s")
        time.sleep(0.1)
    if after["state"] == "CompleteCommit":
        note(f"the transaction of {txn_id!r} was committed before it could be aborted")
    else:
        note(f"aborted the transaction of {txn_id!r}: producer epoch {before['producer_epoch']} "
             f"fenced")
    _print(after, args.json)
    return 0


def add_transaction_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    txns = sub.add_parser("transactions", help="list, describe and abort transactions")
    tsub = txns.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("list", parents=[common], help="list the transactional ids")
    p.add_argument("--state", action="append", metavar="S", help="only this state (repeatable)")
    p.add_argument("--producer-id", action="append", type=int, metavar="ID",
                   help="only this producer id (repeatable)")
    p.add_argument("--duration-ms", type=int, metavar="MS",
                   help="only transactions running longer than this")
    for action, text in (("describe", "a transactional id's state and partitions"),
                         ("abort", "abort its ongoing transaction (fences its producer)")):
        p = tsub.add_parser(action, parents=[common], help=text)
        p.add_argument("--transactional-id", required=True, metavar="ID")
