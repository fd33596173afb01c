"""Start-up recovery: a torn last batch and a flipped byte are cut, the valid prefix is served."""

from __future__ import annotations

from pathlib import Path

from kcoord.protocol.batch import iter_headers

from .clients import consume_confluent, create_topic, produce_confluent
from .harness import BrokerProcess

N = 20


def _one_batch_each(bootstrap: str, topic: str) -> None:
    for i in range(N):  # one flush per message: one batch per message
        produce_confluent(bootstrap, topic, [(0, f"k{i}".encode(), f"v{i}".encode())], "none")


def _batch_positions(segment: Path) -> list[int]:
    return [pos for pos, _ in iter_headers(segment.read_bytes())]


def test_torn_tail_and_flipped_byte_are_cut_at_start_up(broker: BrokerProcess) -> None:
    for topic in ("torn", "flipped"):
        create_topic(broker.bootstrap, topic, 1)
        _one_batch_each(broker.bootstrap, topic)
    broker.kill()

    torn = broker.data_dir / "torn-0" / f"{0:020d}.log"
    positions = _batch_positions(torn)
    assert len(positions) == N
    with open(torn, "r+b") as f:  # the last batch loses its end, as if the write was cut short
        f.truncate(positions[-1] + 30)

    flipped = broker.data_dir / "flipped-0" / f"{0:020d}.log"
    positions = _batch_positions(flipped)
    data = bytearray(flipped.read_bytes())
    data[positions[10] + 65] ^= 0xFF  # inside batch 10's records: its CRC no longer matches
    flipped.write_bytes(bytes(data))

    broker.restart()
    got = consume_confluent(broker.bootstrap, "torn", 1, N - 1)
    assert [o for _, o, _, _ in got] == list(range(N - 1))
    assert [v for _, _, _, v in got] == [f"v{i}".encode() for i in range(N - 1)]

    got = consume_confluent(broker.bootstrap, "flipped", 1, 10)
    assert [o for _, o, _, _ in got] == list(range(10))

    # The logs continue where the valid prefix ends.
    produce_confluent(broker.bootstrap, "flipped", [(0, b"k", b"after")], "none")
    got = consume_confluent(broker.bootstrap, "flipped", 1, 11)
    assert got[-1][1:] == (10, b"k", b"after")
    assert "torn-0" in broker.log() and "flipped-0" in broker.log()
