"""The one configuration object: every setting's name, type, default and where its value came from.

Values are layered: built-in defaults ← an optional TOML file (``--config``) ← environment
variables ``KCOORD_<NAME>`` (upper case, dots as underscores) ← ``--set NAME=VALUE`` flags.
Setting names are Apache Kafka's wherever Kafka has the setting. An unknown name or a value of the
wrong type stops start-up with a message naming the setting and the values it accepts.
``KCOORD_*`` environment variables that name no setting are reported in ``Config.warnings``
(the environment is shared with other programs) rather than refused; ``KCOORD_PURE_PYTHON``
is not a setting but says which build of the hot modules runs (:mod:`compiled`).
"""

from .layers import Config
from .settings import SETTINGS, ConfigError, Setting, is_secret_name, unknown_setting

__all__ = ["SETTINGS", "Config", "ConfigError", "Setting", "is_secret_name", "unknown_setting"]
