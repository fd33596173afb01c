"""``kcoord users add|list|delete``: the SCRAM credentials in a data directory (or the database
of ``--storage-url``, as ``storage.url``), managed before the broker starts (as Kafka's
``kafka-storage format --add-scram``); the broker reads them at start-up. Passwords are never
stored: only the salted SCRAM credentials."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kcoord.storage.engine import Documents
from kcoord.storage.file_engine import FileEngine

from .credentials import CredentialStore
from .scram import DEFAULT_ITERATIONS, MECHANISMS, MIN_ITERATIONS, make_credential


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    users = sub.add_parser("users", help="manage SCRAM users in a data directory (broker stopped)")
    usub = users.add_subparsers(dest="action", required=True)
    for name, help_text in (("add", "add or replace a user's credential"), ("list", "list users"),
                            ("delete", "delete a user or one of its mechanisms")):
        p = usub.add_parser(name, help=help_text)
        p.add_argument("--data-dir", default="data", help="the broker's data directory")
        p.add_argument(
            "--storage-url",
            default=os.environ.get("KCOORD_STORAGE_URL", ""),
            help="the broker's storage.url, if it keeps its data in PostgreSQL",
        )
        if name != "list":
            p.add_argument("name", metavar="NAME")
            p.add_argument("--mechanism", choices=sorted(MECHANISMS), default=None)
        if name == "add":
            p.add_argument("--password", required=True)
            p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)


def _documents(args: argparse.Namespace) -> Documents:
    url = args.storage_url.strip()
    if url.startswith(("postgresql://", "postgres://")):
        from kcoord.storage.postgres.engine import PostgresEngine  # (psycopg: slow to import)

        engine = PostgresEngine(url, pool_size=1)
        engine.start()  # (creates the tables of a database no broker used yet)
        return engine
    return FileEngine(Path(args.data_dir))


def run(args: argparse.Namespace) -> int:
    store = CredentialStore(_documents(args))
    if args.action == "list":
        for user, mechanisms in sorted(store.users.items()):
            print(f"{user}\t{','.join(sorted(mechanisms))}")
        return 0
    if args.action == "add":
        if args.iterations < MIN_ITERATIONS:
            print(f"kcoord: --iterations must be at least {MIN_ITERATIONS}", file=sys.stderr)
            return 2
        for mechanism in [args.mechanism] if args.mechanism else sorted(MECHANISMS):
            store.put(args.name, mechanism, make_credential(mechanism, args.password, args.iterations))
        return 0
    if not store.delete(args.name, args.mechanism):
        print(f"kcoord: no such user or mechanism: {args.name}", file=sys.stderr)
        return 1
    return 0
