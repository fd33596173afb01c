"""The broker's ACLs, durable in the storage engine.

The document ``acls.json`` lists every ACL; it is replaced atomically and durably before
CreateAcls or DeleteAcls answers, so an acknowledged change survives a crash and a crash leaves
the old or the new list. A change is made on the document as stored (:func:`with_added`,
:func:`without_matching`: pure functions of its bytes), so two nodes of a cluster changing it at
once both keep theirs (``Documents.update_document``). The in-memory
:class:`~broker.security.acl.model.AclAuthorizer` then becomes what the document holds: a change
applies to the next request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from kcoord.storage.engine import Documents

from ...cluster.documents import DocumentUpdates
from .model import Acl, AclAuthorizer, AclFilter

if TYPE_CHECKING:
    from ...config import Config

FILE_NAME = "acls.json"


def load_acls(documents: Documents) -> list[Acl]:
    return parse_acls(documents.read_document(FILE_NAME))


def parse_acls(raw: bytes | None) -> list[Acl]:
    """The ACLs of a stored ``acls.json`` (none if there is none)."""
    if raw is None:
        return []
    return [Acl.from_json(d) for d in json.loads(raw)["acls"]]


def encode_acls(acls: Iterable[Acl]) -> bytes:
    return json.dumps({"version": 1, "acls": [a.to_json() for a in acls]}, indent=1).encode()


def with_added(raw: bytes | None, acls: Iterable[Acl]) -> bytes | None:
    """The stored document ``raw`` with ``acls`` added (those already there once); None if it
    holds them all already."""
    stored = parse_acls(raw)
    held = set(stored)
    new = [a for a in dict.fromkeys(acls) if a not in held]
    return encode_acls(stored + new) if new else None


def without_matching(
    raw: bytes | None, filters: Sequence[AclFilter | None]
) -> tuple[bytes | None, list[list[Acl]]]:
    """The stored document ``raw`` without the ACLs any of ``filters`` matches (None: nothing
    matched), and what each filter matched (a None filter, one refused, matches nothing)."""
    stored = parse_acls(raw)
    matched = [[a for a in stored if f is not None and f.matches(a)] for f in filters]
    doomed = {a for acls in matched for a in acls}
    if not doomed:
        return None, matched
    return encode_acls(a for a in stored if a not in doomed), matched


def build_authorizer(
    config: Config, documents: Documents, denied: Callable[[str, str], None]
) -> AclAuthorizer | None:
    """The authorizer with the stored ACLs when ``authorizer.class.name`` is set, else None."""
    if not config["authorizer.class.name"].strip():
        return None
    return AclAuthorizer(
        load_acls(documents),
        super_users=[u.strip() for u in config["super.users"].split(";") if u.strip()],
        allow_if_no_acl=config["allow.everyone.if.no.acl.found"],
        denied=denied,
    )


class AclStore:
    def __init__(self, documents: Documents, authorizer: AclAuthorizer) -> None:
        self.documents = documents
        self.authorizer = authorizer
        self.updates = DocumentUpdates(documents, FILE_NAME, self.stored_elsewhere)

    async def add(self, acls: Iterable[Acl]) -> None:
        """Store ACLs (those already there are left as they are); OSError if the document cannot
        be written, and then nothing changed."""
        wanted = tuple(acls)
        if wanted:
            await self.updates.update(lambda raw: with_added(raw, wanted))

    async def remove(self, filters: Sequence[AclFilter | None]) -> list[list[Acl]]:
        """Delete the ACLs the filters match in the stored document; what each matched. OSError
        if the document cannot be written, and then nothing changed."""
        matched: list[list[Acl]] = [[] for _ in filters]

        def change(raw: bytes | None) -> bytes | None:
            nonlocal matched
            new, matched = without_matching(raw, filters)  # (the last call is the one stored)
            return new

        if any(f is not None for f in filters):
            await self.updates.update(change)
        return matched

    def stored_elsewhere(self, raw: bytes | None) -> None:
        """The ACLs become what a stored document holds (another node changed it, in cluster
        mode; or this node, after a change)."""
        now = set(parse_acls(raw))
        held = set(self.authorizer.acls())
        self.authorizer.remove(held - now)
        self.authorizer.add(now - held)
