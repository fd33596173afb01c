"""What a setting is: its name, type, default, checks and whether it is secret (the table of
them all is ``settings``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A setting that does not exist or whose value is not acceptable."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: type
    default: Any
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    """For a string setting: a comma-separated list of these (e.g. ``log.cleanup.policy``)."""
    single: bool = False
    """With ``choices``: exactly one of them (e.g. ``compression.type``), not a list."""
    secret: bool = False
    """A secret whose name does not say so (see :attr:`sensitive`)."""
    maximum: int | None = None
    """For a number: the largest value accepted (e.g. ``compression.lz4.level``)."""

    @property
    def sensitive(self) -> bool:
        """Whether the value is a secret: never shown, by DescribeConfigs (a null value marked
        sensitive, as Kafka answers its password-type configs) nor by ``kcoord config``.

        Decided here, by name as well as by flag, so that a secret setting added later under
        one of Kafka's names (``ssl.keystore.password``, ``sasl.jaas.config``, ...) is hidden
        without anyone remembering to say so."""
        return self.secret or is_secret_name(self.name)

    def allowed(self) -> str:
        """The values this setting accepts, in words (for error messages and ``kcoord config``)."""
        if self.choices is not None:
            if self.single:
                return f"one of {', '.join(self.choices)}"
            return f"a comma-separated list of {', '.join(self.choices)}"
        if self.type is bool:
            return "true or false"
        if self.type in (int, float):
            low = f" >= {self.minimum}" if self.minimum is not None else ""
            high = f" <= {self.maximum}" if self.maximum is not None else ""
            joined = " and" if low and high else ""
            return f"{'an integer' if self.type is int else 'a number'}{low}{joined}{high}"
        return "a string"


_SECRET_NAMES = frozenset(
    # Kafka's password-type settings whose names hold no "password" or "secret"
    {
        "sasl.jaas.config",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
    }
)


def is_secret_name(name: str) -> bool:
    """Whether a setting of this name holds a secret, as Kafka types it PASSWORD: any
    ``*.password``, anything naming a secret, a JAAS configuration, an inline PEM key or store
    (listener-prefixed forms included)."""
    lowered = name.lower()
    return (
        lowered.endswith(".password")
        or "secret" in lowered
        or lowered.endswith(".jaas.config")
        or any(lowered == n or lowered.endswith("." + n) for n in _SECRET_NAMES)
    )
