"""The console's HTTP routes on the ``--metrics-port`` server: the page, its JSON, its actions.

``/`` is the page (``static/index.html``, with ``/console.js``, its other scripts and
``/console.css``);
``/api/groups``, ``/api/groups/<group>`` (the id percent-encoded) and ``/api/topics`` answer
JSON (:mod:`broker.console.views`), ``/api/cluster`` the nodes, who leads what and every group
of the cluster (:mod:`broker.console.cluster_views`), ``/api/messages`` a page of a partition's records
(:mod:`broker.console.messages`), ``/api/session`` who is logged in and the token the actions
need. Input is checked before anything is read: a path or query over :data:`MAX_TARGET` bytes,
a bad percent-encoding, an unknown or repeated query parameter or a value out of range answers
400; an unknown path or group answers 404. A GET never changes the broker's state.

The actions are POSTs with a JSON body to ``/api/groups/<group>/<action>``: ``reset-offsets``
(``{"to": ..., "execute": false}`` is the dry run), ``delete``, ``delete-offsets``
(:mod:`broker.console.actions`); each must pass :mod:`broker.console.csrf`'s checks first.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote

from ..net.offload import off_loop
from ..security.acl.model import Operation, ResourceType
from .actions import Refused, Who, delete_group, delete_offsets, reset_offsets
from .cluster_views import describe_cluster
from .csrf import Csrf
from .login import Viewer
from .messages import DEFAULT_VALUE_BYTES, MAX_PAGE, MAX_VALUE_BYTES, Page, Unreadable, browse
from .views import MAX_GROUPS, ConsoleState, describe_group, list_groups, list_topics

MAX_TARGET = 4096
"""The longest request target (path and query) the console reads."""
MAX_GROUP_ID = 1024
STUCK_MS = 60_000
"""A group rebalancing for longer than this is flagged as stuck (``?stuck_ms=`` changes it)."""

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/actions.js": ("actions.js", "text/javascript; charset=utf-8"),
    "/messages.js": ("messages.js", "text/javascript; charset=utf-8"),
    "/cluster.js": ("cluster.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
_PARAMS = {
    "/api/groups": {"limit", "q", "stuck_ms"},
    "/api/topics": {"limit", "q"},
    "/api/group": {"stuck_ms"},
    "/api/messages": {"topic", "partition", "offset", "timestamp", "limit", "isolation", "max_bytes"},
    "/api/session": set(),
    "/api/cluster": {"limit", "q"},
}
ACTIONS = ("reset-offsets", "delete", "delete-offsets")
MAX_OFFSET = (1 << 63) - 1

Answer = tuple[int, str, bytes]


class BadRequest(ValueError):
    pass


def _error(status: int, message: str) -> Answer:
    return status, JSON, json.dumps({"error": message}).encode()


def _int(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None or (text == "" and name in ("offset", "timestamp")):
        return default
    if not text.isdigit() or len(text) > 19 or not low <= int(text) <= high:
        raise BadRequest(f"{name} must be an integer in {low}..{high}")
    return int(text)


def _params(query: str, allowed: set[str]) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=10, errors="strict")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"bad query string: {e}") from None
    params: dict[str, str] = {}
    for key, value in pairs:
        if key not in allowed:
            raise BadRequest(f"unknown parameter {key!r}; allowed: {', '.join(sorted(allowed))}")
        if key in params:
            raise BadRequest(f"parameter {key!r} given twice")
        params[key] = value
    return params


class Console:
    """Answers the console's paths; :meth:`respond` gives None for any other path."""

    def __init__(self, state: ConsoleState) -> None:
        self.state = state
        self.csrf = Csrf()
        self._static: dict[str, bytes] = {}

    def static(self, name: str) -> bytes:
        body = self._static.get(name)
        if body is None:
            body = self._static[name] = (
                resources.files(__package__).joinpath("static", name).read_bytes()
            )
        return body

    async def respond(
        self,
        target: str,
        viewer: Viewer | None = None,
        *,
        method: str = "GET",
        authorization: str | None = None,
        host: str = "",
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> Answer | None:
        """The answer for a console path (None for any other), showing what ``viewer`` may
        describe (everything if None); a POST is an action, done if ``viewer`` may."""
        path, _, query = target.partition("?")
        if method == "POST":
            if len(target) > MAX_TARGET:
                return _error(400, "request target too long")
            return await self._post(path, viewer, authorization, host, headers or {}, body)
        if path in STATIC and not path.startswith("/api"):
            if len(target) > MAX_TARGET:
                return _error(400, "request target too long")
            name, ctype = STATIC[path]
            return 200, ctype, self.static(name)
        if path != "/api" and not path.startswith("/api/"):
            return None
        if len(target) > MAX_TARGET:
            return _error(400, f"request target over {MAX_TARGET} bytes")
        try:
            return await self._api(path, query, viewer, authorization)
        except BadRequest as e:
            return _error(400, str(e))

    @staticmethod
    def handles(target: str) -> bool:
        """Whether ``target`` is a console path (the page, its files, its JSON)."""
        path = target.partition("?")[0]
        return path in STATIC or path == "/api" or path.startswith("/api/")

    async def _api(
        self, path: str, query: str, viewer: Viewer | None, authorization: str | None
    ) -> Answer:
        state = self.state
        result: Any
        if path == "/api/groups":
            p = _params(query, _PARAMS[path])
            result = await list_groups(
                state,
                limit=_int(p, "limit", MAX_GROUPS, 1, MAX_GROUPS),
                match=_checked(p.get("q", "")),
                stuck_ms=_int(p, "stuck_ms", STUCK_MS, 0, 86_400_000),
                viewer=viewer,
            )
        elif path.startswith("/api/groups/"):
            group_id = _text(path[len("/api/groups/") :], MAX_GROUP_ID)
            if not group_id:
                raise BadRequest("empty group id")
            p = _params(query, _PARAMS["/api/group"])
            result = describe_group(
                state, group_id, stuck_ms=_int(p, "stuck_ms", STUCK_MS, 0, 86_400_000), viewer=viewer
            )
            if result is None:
                return _error(404, f"no group {group_id!r}")
        elif path == "/api/session":
            _params(query, _PARAMS[path])
            result = {
                "principal": viewer.principal if viewer is not None else None,
                "csrf_token": self.csrf.token(authorization),
            }
        elif path == "/api/messages":
            p = _params(query, _PARAMS[path])
            return await self._messages(p, viewer)
        elif path == "/api/cluster":
            p = _params(query, _PARAMS[path])
            result = await describe_cluster(
                state,
                limit=_int(p, "limit", MAX_GROUPS, 1, MAX_GROUPS),
                match=_checked(p.get("q", "")),
                viewer=viewer,
            )
        elif path == "/api/topics":
            p = _params(query, _PARAMS[path])
            result = await list_topics(
                state,
                limit=_int(p, "limit", MAX_GROUPS, 1, MAX_GROUPS),
                match=_checked(p.get("q", "")),
                viewer=viewer,
            )
        else:
            return _error(
                404,
                "unknown API path; try /api/groups, /api/groups/<group>, /api/topics,"
                " /api/cluster, /api/messages, /api/session",
            )
        return 200, JSON, await off_loop(_encode, result)

    async def _messages(self, p: dict[str, str], viewer: Viewer | None) -> Answer:
        topic = _checked(p.get("topic", ""))
        if not topic:
            raise BadRequest("topic is required")
        isolation = p.get("isolation", "read_uncommitted")
        if isolation not in ("read_uncommitted", "read_committed"):
            raise BadRequest("isolation must be read_uncommitted or read_committed")
        if viewer is not None and not viewer.topic(topic):
            return _error(404, f"no topic {topic!r}")
        if viewer is not None and not viewer.may(Operation.READ, ResourceType.TOPIC, topic):
            return _error(403, f"{viewer.principal} may not READ topic {topic!r} (as Fetch)")
        offset = _int(p, "offset", -1, 0, MAX_OFFSET)
        timestamp = _int(p, "timestamp", -1, 0, MAX_OFFSET)
        page = Page(
            topic=topic,
            partition=_int(p, "partition", 0, 0, 1 << 20),
            offset=None if offset < 0 else offset,
            timestamp=None if timestamp < 0 else timestamp,
            limit=_int(p, "limit", 20, 1, MAX_PAGE),
            committed=isolation == "read_committed",
            max_bytes=_int(p, "max_bytes", DEFAULT_VALUE_BYTES, 0, MAX_VALUE_BYTES),
        )
        try:
            result = await browse(self.state.topics, page)
        except Unreadable as e:
            return _error(e.status, str(e))
        return 200, JSON, await off_loop(_encode, result)

    async def _post(
        self,
        path: str,
        viewer: Viewer | None,
        authorization: str | None,
        host: str,
        headers: dict[str, str],
        body: bytes,
    ) -> Answer:
        prefix = "/api/groups/"
        encoded, _, action = path[len(prefix) :].rpartition("/")
        if not path.startswith(prefix) or action not in ACTIONS or not encoded:
            return _error(405, "only /api/groups/<group>/{" + ",".join(ACTIONS) + "} take a POST")
        refusal = self.csrf.refusal(authorization, headers)
        if refusal is not None:
            return _error(403, refusal)
        try:
            group_id = _text(encoded, MAX_GROUP_ID)
            spec = json.loads(body or b"{}")
        except BadRequest as e:
            return _error(400, str(e))
        except ValueError:
            return _error(400, "the body must be JSON")
        if not isinstance(spec, dict):
            return _error(400, "the body must be a JSON object")
        who = Who(viewer, host)
        try:
            if action == "reset-offsets":
                result = await reset_offsets(self.state, group_id, spec, who)
            elif action == "delete":
                result = await delete_group(self.state, group_id, who)
            else:
                result = await delete_offsets(self.state, group_id, spec.get("topic"), who)
        except Refused as e:
            return _error(e.status, str(e))
        return 200, JSON, _encode(result)


def _text(raw: str, limit: int) -> str:
    """A percent-decoded path segment (UTF-8, no control characters)."""
    try:
        text = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise BadRequest("bad percent-encoding") from None
    return _checked(text, limit)


def _checked(text: str, limit: int = 256) -> str:
    if len(text) > limit:
        raise BadRequest(f"over {limit} characters")
    if any(ord(c) < 0x20 for c in text):
        raise BadRequest("control characters")
    return text


def _encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
