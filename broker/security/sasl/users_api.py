"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): the SCRAM users,
managed online by admin clients (confluent-kafka's ``describe_user_scram_credentials`` and
``alter_user_scram_credentials``). The client sends a salted password, never the password.
A request's valid changes are made together, as Kafka makes them in one atomic batch of
records: one document write in a worker thread (``credentials.py``), answered once durable, and
they apply to the next login. Kafka bounds the number of changes a request may carry only by the
request's size, and so does kcoord (``socket.request.max.elements``)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode
from kcoord.storage.files import describe_error

from ..acl.model import CLUSTER_NAME, Operation, ResourceType
from .credentials import CredentialStore, Upsertion
from .scram import MAX_ITERATIONS, MECHANISM_IDS, MIN_ITERATIONS

if TYPE_CHECKING:
    from ...net.connection import RequestContext

log = logging.getLogger("kcoord.sasl")

_BY_ID = {number: name for name, number in MECHANISM_IDS.items()}


class UsersApi:
    def __init__(self, store: CredentialStore) -> None:
        self.store = store

    def describe(self, ctx: RequestContext, req: Any) -> Any:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return ctx.respond(
                throttle_time=0,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="DESCRIBE on the cluster is needed.",
                results=[],
            )
        store = self.store
        wanted = sorted(store.users) if req.users is None else [u.name for u in req.users]
        seen = Counter(wanted)
        results: list[dict[str, Any]] = []
        for user in dict.fromkeys(wanted):
            if seen[user] > 1:
                results.append(
                    dict(
                        user=user,
                        error_code=ErrorCode.duplicate_resource,
                        error_message=f"User {user} is named more than once",
                        credential_infos=[],
                    )
                )
                continue
            mechanisms = store.users.get(user)
            if not mechanisms:
                results.append(
                    dict(
                        user=user,
                        error_code=ErrorCode.resource_not_found,
                        error_message=f"Attempt to describe a user credential that does not exist: {user}",
                        credential_infos=[],
                    )
                )
                continue
            infos = [
                dict(mechanism=MECHANISM_IDS[m], iterations=c.iterations)
                for m, c in sorted(mechanisms.items())
            ]
            results.append(
                dict(user=user, error_code=0, error_message=None, credential_infos=infos)
            )
        return ctx.respond(throttle_time=0, error_code=0, error_message=None, results=results)

    async def alter(self, ctx: RequestContext, req: Any) -> Any:
        store = self.store
        named = Counter([d.name for d in req.deletions] + [u.name for u in req.upsertions])
        errors: dict[str, tuple[int, str]] = {}
        if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            refused = (ErrorCode.cluster_authorization_failed, "ALTER on the cluster is needed.")
            errors = dict.fromkeys(named, refused)
        for user, n in named.items():
            if not user:
                errors[user] = (ErrorCode.unacceptable_credential, "Username must not be empty")
            elif n > 1:
                errors[user] = (
                    ErrorCode.duplicate_resource,
                    f"A user credential cannot be altered twice in the same request: {user}",
                )
        for d in req.deletions:
            mechanism = _BY_ID.get(d.mechanism)
            if d.name in errors:
                continue
            if mechanism is None:
                errors[d.name] = (
                    ErrorCode.unsupported_sasl_mechanism,
                    f"Unknown SCRAM mechanism {d.mechanism}",
                )
            elif store.get(d.name, mechanism) is None:
                errors[d.name] = (
                    ErrorCode.resource_not_found,
                    f"Attempt to delete a user credential that does not exist: {d.name}",
                )
        for u in req.upsertions:
            mechanism = _BY_ID.get(u.mechanism)
            if u.name in errors:
                continue
            if mechanism is None:
                errors[u.name] = (
                    ErrorCode.unsupported_sasl_mechanism,
                    f"Unknown SCRAM mechanism {u.mechanism}",
                )
            elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
                errors[u.name] = (
                    ErrorCode.unacceptable_credential,
                    f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
                )
            elif not u.salt or not u.salted_password:
                errors[u.name] = (
                    ErrorCode.unacceptable_credential,
                    "Salt and salted password must not be empty",
                )
        deletions = [(d.name, _BY_ID[d.mechanism]) for d in req.deletions if d.name not in errors]
        upsertions = [
            Upsertion(
                u.name, _BY_ID[u.mechanism], bytes(u.salted_password), bytes(u.salt), u.iterations
            )
            for u in req.upsertions
            if u.name not in errors
        ]
        if deletions or upsertions:
            try:
                await store.alter(deletions, upsertions)
            except OSError as e:
                log.error("could not store SCRAM credentials: %s", describe_error(e))
                failed = (ErrorCode.kafka_storage_error, "The credentials could not be stored.")
                for user in named:
                    errors.setdefault(user, failed)
        results = [
            dict(
                user=user,
                error_code=errors.get(user, (0, None))[0],
                error_message=errors.get(user, (0, None))[1],
            )
            for user in named
        ]
        return ctx.respond(throttle_time=0, results=results)
