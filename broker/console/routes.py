"""The console's HTTP routes on the ``--metrics-port`` server: the page and its JSON.

``/`` is the page (``static/index.html``, with ``/console.js`` and ``/console.css``);
``/api/groups``, ``/api/groups/<group>`` (the id percent-encoded) and ``/api/topics`` answer
JSON (:mod:`broker.console.views`). Input is checked before anything is read: a path or query
over :data:`MAX_TARGET` bytes, a bad percent-encoding, an unknown or repeated query parameter or
a value out of range answers 400; an unknown path or group answers 404. Nothing here changes
the broker's state.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote

from ..net.offload import off_loop
from .login import Viewer
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
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
_PARAMS = {
    "/api/groups": {"limit", "q", "stuck_ms"},
    "/api/topics": {"limit", "q"},
    "/api/group": {"stuck_ms"},
}

Answer = tuple[int, str, bytes]


class BadRequest(ValueError):
    pass


def _error(status: int, message: str) -> Answer:
    return status, JSON, json.dumps({"error": message}).encode()


def _int(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isdigit() or len(text) > 12 or not low <= int(text) <= high:
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
        self._static: dict[str, bytes] = {}

    def static(self, name: str) -> bytes:
        body = self._static.get(name)
        if body is None:
            body = self._static[name] = (
                resources.files(__package__).joinpath("static", name).read_bytes()
            )
        return body

    async def respond(self, target: str, viewer: Viewer | None = None) -> Answer | None:
        """The answer for a console path (None for any other), showing what ``viewer`` may
        describe (everything if None)."""
        path, _, query = target.partition("?")
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
            return await self._api(path, query, viewer)
        except BadRequest as e:
            return _error(400, str(e))

    @staticmethod
    def handles(target: str) -> bool:
        """Whether ``target`` is a console path (the page, its files, its JSON)."""
        path = target.partition("?")[0]
        return path in STATIC or path == "/api" or path.startswith("/api/")

    async def _api(self, path: str, query: str, viewer: Viewer | None) -> Answer:
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
                404, "unknown API path; try /api/groups, /api/groups/<group>, /api/topics"
            )
        return 200, JSON, await off_loop(_encode, result)


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
