"""The pytest plugin of :mod:`kcoord.testing`, registered through the ``pytest11`` entry point:
installing kcoord is all it takes to have its fixtures.

- ``kafka_broker`` (session): one broker for the whole run (one per xdist worker), started on
  first use; ``kafka_bootstrap`` (session) is its ``host:port``.
- ``kafka_broker_factory``: a function making brokers of their own for one test, with their own
  settings (``kafka_broker_factory(num_partitions=1)``); each is killed and removed after it.

The session broker's settings: ``--kcoord-set NAME=VALUE`` on the command line (repeatable) or
the ``kcoord_set`` ini option (one ``NAME=VALUE`` a line), both on top of the ``--dev`` preset.
Nothing here starts a broker unless a test asks for one of the fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .testing import TestBroker, setting_name

BrokerFactory = Callable[..., TestBroker]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kcoord", "kcoord test broker")
    group.addoption(
        "--kcoord-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the session's kcoord broker (kafka_bootstrap), by its Kafka name",
    )
    parser.addini(
        "kcoord_set", "settings of the session's kcoord broker, NAME=VALUE a line", type="linelist"
    )


def _session_settings(config: pytest.Config) -> dict[str, str]:
    settings: dict[str, str] = {}
    for item in [*config.getini("kcoord_set"), *config.getoption("kcoord_set")]:
        name, sep, value = str(item).partition("=")
        if not sep:
            raise pytest.UsageError(f"kcoord setting {item!r}: expected NAME=VALUE")
        settings[name.strip()] = value.strip()
    return settings


@pytest.fixture(scope="session")
def kafka_broker(pytestconfig: pytest.Config) -> Iterator[TestBroker]:
    """One kcoord broker for the session (see the module's doc for its settings)."""
    with TestBroker(_session_settings(pytestconfig)) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: TestBroker) -> str:
    """``bootstrap.servers`` of the session's broker."""
    return kafka_broker.bootstrap


@pytest.fixture
def kafka_broker_factory() -> Iterator[BrokerFactory]:
    """``make(settings=None, *, dev=True, console=False, **settings_with_underscores)``: a
    started broker of this test's own."""
    made: list[TestBroker] = []

    def make(
        settings: dict[str, object] | None = None,
        *,
        dev: bool = True,
        console: bool = False,
        **more: object,
    ) -> TestBroker:
        merged = {**(settings or {}), **{setting_name(k): v for k, v in more.items()}}
        broker = TestBroker(merged, dev=dev, console=console)
        made.append(broker)
        return broker.start()

    yield make
    for broker in made:
        broker.close()
