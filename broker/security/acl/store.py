"""The broker's ACLs, durable in the storage engine.

The document ``acls.json`` lists every ACL; it is replaced atomically and durably before
CreateAcls or DeleteAcls answers, so an acknowledged change survives a crash and a crash leaves
the old or the new list. The in-memory :class:`~broker.security.acl.model.AclAuthorizer` changes
with the document: a change applies to the next request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kcoord.storage.engine import Documents

from .model import Acl, AclAuthorizer

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

    def add(self, acls: Iterable[Acl]) -> None:
        """Store ACLs (those already there are left as they are); OSError if the document cannot
        be written, and then nothing changed."""
        new = self.authorizer.add(acls)
        if new:
            try:
                self._save()
            except OSError:
                self.authorizer.remove(new)
                raise

    def remove(self, acls: Iterable[Acl]) -> None:
        """Delete ACLs; OSError if the document cannot be written, and then nothing changed."""
        acls = list(acls)
        if acls:
            self.authorizer.remove(acls)
            try:
                self._save()
            except OSError:
                self.authorizer.add(acls)
                raise

    def stored_elsewhere(self, raw: bytes | None) -> None:
        """Another node changed the document (cluster mode): the ACLs become what it holds."""
        now = set(parse_acls(raw))
        held = set(self.authorizer.acls())
        self.authorizer.remove(held - now)
        self.authorizer.add(now - held)

    def _save(self) -> None:
        data = {"version": 1, "acls": [a.to_json() for a in self.authorizer.acls()]}
        self.documents.write_document(FILE_NAME, json.dumps(data, indent=1).encode())
