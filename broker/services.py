"""Services shared by the broker's parts that have no module of their own: the metrics hooks.

No part of the broker is handed the broker itself. ``broker/app.py`` builds every part and
gives each one, as constructor parameters, the few services it uses: the config, the topic
store, the flusher, the group runtime, the request memory budget, and the hooks defined here.
This module imports nothing from the rest of ``broker/``, so any part may depend on it without
closing an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kcoord.coordinator.output import RebalanceCompleted


def _ignore_request(api_key: int) -> None:
    return None


def _ignore_response(api_key: int, started: float) -> None:
    return None


def _ignore_seconds(seconds: float) -> None:
    return None


def _ignore_reason(reason: str) -> None:
    return None


def _ignore_denial(principal: str, resource_type: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class MetricsHooks:
    """Where the broker's parts report what they measure (``broker/metrics/prometheus.py`` builds the
    real ones). The default hooks do nothing: that is what a broker gets without
    ``--metrics-port``, and then measuring costs nothing beyond a call.

    A part binds the hooks it calls to attributes of its own once, when it is built, so that a
    hook costs one call wherever it runs per request or per append.
    """

    enabled: bool = False
    """Whether the hooks record anything (metrics are served)."""
    request: Callable[[int], None] = _ignore_request
    """A request of this API key arrived."""
    response: Callable[[int, float], None] = _ignore_response
    """``(api_key, started)``: the response is ready; ``started`` is the request's
    ``time.perf_counter()`` on arrival."""
    log_append: Callable[[float], None] = _ignore_seconds
    """Seconds to append a batch (or a shard's batches) to a partition log, fsync excluded."""
    log_flush: Callable[[float], None] | None = None
    """Seconds of one group-commit fsync round; None when not measured (the flusher then does
    not read the clock)."""
    partition_load: Callable[[float], None] = _ignore_seconds
    """Seconds to load one ``__consumer_offsets`` partition at start-up."""
    rebalance: Callable[[RebalanceCompleted], None] | None = None
    """A group completed a rebalance (the shards' observer; None: no observer)."""
    refused: Callable[[str], None] = _ignore_reason
    """A connection was closed by a limit or a failed login (the reason's kind: max_connections,
    max_connections_per_ip, idle, authentication)."""
    denied: Callable[[str, str], None] = _ignore_denial
    """``(principal, resource_type)``: the authorizer refused an operation (ACLs)."""
    share_partition_load: Callable[[float], None] | None = None
    """Seconds to load one share partition (its state read, or initialized); None: not
    measured."""
    share_state_write: Callable[[float], None] | None = None
    """Seconds of one share-state write made durable (the share coordinator); None: not
    measured."""
