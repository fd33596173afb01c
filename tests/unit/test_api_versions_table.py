"""docs/protocol.md's table of API versions against Kafka 4.3 is what protocol/apis.py
advertises, and kcoord advertises no version past the one a Kafka 4.3 broker does."""

from __future__ import annotations

import re
from pathlib import Path

from kcoord.protocol.apis import SUPPORTED, ApiKey
from kcoord.protocol.codec import request_type

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
_ROW = re.compile(r"^\| (\w+) \((\d+)\) \| (\d+) \| ([^|]+?) \|")


def _table() -> dict[int, tuple[str, int, tuple[int, int] | None]]:
    """Key -> (name, Kafka 4.3's highest version, kcoord's range or None when not served)."""
    text = DOC.read_text()
    section = text[text.index("## Versions against Kafka 4.3") :]
    rows: dict[int, tuple[str, int, tuple[int, int] | None]] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        name, key, kafka, ours = match.groups()
        served: tuple[int, int] | None = None
        if ours != "—":
            low, _, high = ours.partition("–")
            served = (int(low), int(high or low))
        assert int(key) not in rows, f"{name} twice"
        rows[int(key)] = (name, int(kafka), served)
    return rows


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def test_the_table_is_what_api_versions_lists() -> None:
    rows = _table()
    assert {key: served for key, (_, _, served) in rows.items() if served} == SUPPORTED
    for key, (name, _, _) in rows.items():
        if key in ApiKey._value2member_map_:
            assert ApiKey(key).name == _snake(name), (key, name)


def test_no_version_past_kafka_4_3() -> None:
    for key, (name, kafka, served) in _table().items():
        if served is not None:
            assert served[1] <= kafka, f"{name}: kcoord lists v{served[1]}, Kafka 4.3 v{kafka}"
            request_type(key, kafka)  # a version Kafka's schemas have (kio models them)
