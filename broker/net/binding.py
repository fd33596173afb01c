"""Binding the broker's ports before anything else starts, and saying plainly when one cannot be.

The Kafka listeners are bound (not yet listening) at the very start of ``Broker.start``, so that
a port already in use stops start-up at once, before any log is loaded, with a
:class:`ListenError` whose message says which address and what to do; the command line prints
it as one line and exits with status 2. A listener on port 0 gets a free port from the kernel
here, and the :class:`Listener` handed on carries that port, advertised too where its advertised
port was 0 as well: clients are never sent to port 0.

The sockets are bound as asyncio's ``create_server`` would bind them (every address the host
name resolves to, ``SO_REUSEADDR``, IPv6 sockets IPv6-only); where one name resolves to several
addresses and the port is 0, all of them get the port the first was given.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import logging
import socket

from ..config import Config
from .listeners import Listener

log = logging.getLogger("kcoord.broker")


class ListenError(Exception):
    """A port the broker was told to use cannot be bound; the message says what to do."""


def describe_bind_error(what: str, host: str, port: int, error: OSError, hint: str) -> str:
    """One line: which address could not be bound, why, and what to do about it."""
    address = f"{host or '*'}:{port}"
    if error.errno == errno.EADDRINUSE:
        return f"cannot listen on {address} for {what}: the port is already in use; {hint}"
    if error.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {address} for {what}: no such address on this machine; give one"
            " of its own addresses (or 0.0.0.0 for all)"
        )
    if error.errno == errno.EACCES:
        return (
            f"cannot listen on {address} for {what}: permission denied (ports below 1024 need"
            f" privileges); {hint}"
        )
    reason = error.strerror or str(error)
    return f"cannot listen on {address} for {what}: {reason}; {hint}"


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound (not listening) TCP sockets for ``host:port``; port 0: a free port, the same on
    every socket. Raises OSError (a name that does not resolve: ``socket.gaierror``)."""
    infos = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    seen: set[tuple[int, object]] = set()
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def bind_listener(listener: Listener) -> tuple[Listener, list[socket.socket]]:
    """The listener's sockets, bound, and the listener with its real port (see module doc).
    Raises :class:`ListenError`."""
    try:
        sockets = bind_sockets(listener.host, listener.port)
    except OSError as e:
        hint = (
            "stop what uses it, or choose another port with --port (0: any free port)"
            " or the listeners setting"
        )
        if isinstance(e, socket.gaierror):
            message = (
                f"cannot listen on {listener.host}:{listener.port} for Kafka listener"
                f" {listener.name}: the host name does not resolve ({e.strerror})"
            )
            raise ListenError(message) from None
        what = f"Kafka listener {listener.name}"
        raise ListenError(describe_bind_error(what, listener.host, listener.port, e, hint)) from None
    if listener.port == 0:
        port = int(sockets[0].getsockname()[1])
        advertised = listener.advertised_port or port
        listener = dataclasses.replace(listener, port=port, advertised_port=advertised)
    return listener, sockets


def bind_listeners(listeners: list[Listener]) -> list[tuple[Listener, list[socket.socket]]]:
    """:func:`bind_listener` for each; on a failure those already bound are closed."""
    bound: list[tuple[Listener, list[socket.socket]]] = []
    try:
        for listener in listeners:
            bound.append(bind_listener(listener))
    except BaseException:
        for _, sockets in bound:
            for sock in sockets:
                sock.close()
        raise
    return bound


def console_unbound(config: Config, error: OSError, sockets: list[list[socket.socket]]) -> None:
    """The metrics port (the console's too) could not be bound: raise :class:`ListenError`
    where that port was asked for (after closing the Kafka ``sockets``), or log one line and
    carry on without it (``kcoord serve``'s default console)."""
    port = config.metrics_port or 0
    what = "the console and metrics"
    if config.metrics_required:
        for sock in itertools.chain.from_iterable(sockets):
            sock.close()
        hint = "stop what uses it, or choose another port with --metrics-port (0: any free port)"
        raise ListenError(describe_bind_error(what, config.metrics_host, port, error, hint))
    hint = (
        "serving Kafka without them (--metrics-port N puts them on another port, 0: any free"
        " one; --no-console turns them off)"
    )
    log.warning("%s", describe_bind_error(what, config.metrics_host, port, error, hint))
