"""Connection limits (Kafka's names): ``max.connections`` over all listeners,
``max.connections.per.ip`` with ``max.connections.per.ip.overrides`` (``host:count,...``), and
``connections.max.idle.ms`` (the broker's sweeper closes connections silent for that long).

A connection over a limit is closed as soon as it is accepted, with a log line and the
``kcoord_connections_refused_total`` metric; the others keep working.
"""

from __future__ import annotations

from collections import Counter

from ..config import Config, ConfigError


class ConnectionLimits:
    def __init__(self, config: Config) -> None:
        self.max_total: int = config["max.connections"]
        self.max_per_ip: int = config["max.connections.per.ip"]
        self.overrides: dict[str, int] = {}
        for item in config["max.connections.per.ip.overrides"].split(","):
            if not item.strip():
                continue
            host, sep, count = item.strip().rpartition(":")
            try:
                self.overrides[host.strip("[]")] = int(count)
            except ValueError:
                host = ""
            if not sep or not host:
                raise ConfigError(
                    f"setting 'max.connections.per.ip.overrides': {item.strip()!r} is not host:count"
                )
        self.total = 0
        self.by_ip: Counter[str] = Counter()

    def admit(self, ip: str) -> tuple[str, str] | None:
        """Count a new connection from ``ip``; (metric label, reason) if it is over a limit
        (then it is not counted)."""
        if self.total >= self.max_total:
            return "max_connections", f"max.connections ({self.max_total}) reached"
        limit = self.overrides.get(ip, self.max_per_ip)
        if self.by_ip[ip] >= limit:
            return "max_connections_per_ip", f"max.connections.per.ip ({limit}) reached for {ip}"
        self.total += 1
        self.by_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]
