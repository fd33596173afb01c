"""Secret broker settings are never shown (issue: hardening finding 5): DescribeConfigs of the
broker answers them as Kafka answers its password-type configs, a null value marked sensitive
(synonyms included), whoever asks; ``kcoord config`` hides them too."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .rawclient import RawClient

SECRET = "s3cret-key-passphrase"


def test_describe_configs_never_shows_a_secret(broker_factory: Any) -> None:
    broker = broker_factory({"ssl.key.password": SECRET})

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    entry = entries["ssl.key.password"]
    assert entry.value is None and entry.is_sensitive
    assert not any(SECRET in str(e.value) for e in entries.values())
    assert not entries["num.partitions"].is_sensitive and entries["num.partitions"].value == "1"

    for version in (1, 2, 3, 4):
        with RawClient(broker.port) as c:
            r = c.request(
                ApiKey.DESCRIBE_CONFIGS,
                version,
                resources=[dict(resource_type=4, resource_name="0", configuration_keys=None)],
                include_synonyms=True,
                include_documentation=True,
            )
        [result] = r.results
        assert result.error_code == ErrorCode.none
        configs = {x.name: x for x in result.configs}
        password = configs["ssl.key.password"]
        assert password.value is None and password.is_sensitive, version
        assert all(s.value is None for s in password.synonyms), version
        if version >= 3:
            assert password.config_type == 9, version  # PASSWORD
        assert not configs["num.partitions"].is_sensitive


def test_kcoord_config_hides_secrets(capsys: Any) -> None:
    from kcoord.cli import main

    assert main(["config", "--set", f"ssl.key.password={SECRET}"]) == 0
    table = capsys.readouterr().out
    assert SECRET not in table
    row = next(line.split() for line in table.splitlines() if line.startswith("ssl.key.password"))
    assert row[1:] == ["(hidden)", "--set"]

    assert main(["config", "--json", "--verbose", "--set", f"ssl.key.password={SECRET}"]) == 0
    text = capsys.readouterr().out
    assert SECRET not in text
    import json

    rows = {r["name"]: r for r in json.loads(text)}
    assert rows["ssl.key.password"]["value"] is None and rows["ssl.key.password"]["sensitive"]
    assert rows["num.partitions"]["value"] == 1 and not rows["num.partitions"]["sensitive"]
