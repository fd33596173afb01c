"""Wire codec microbenchmark: kio's reader/writer against protocol/fastcodec.py, in µs per call.

Encodes and decodes a few typical request/response bodies (no framing, no header) and prints one
JSON object: for each case the µs per call with kio's writer/reader ("kio") and with the path the
broker uses ("fast"), plus the cost of building the response entity with protocol.responses.build.

    .venv/bin/python bench/codec.py [--seconds 0.3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.serial import entity_reader  # noqa: E402

from kcoord.protocol import fastcodec  # noqa: E402
from kcoord.protocol.codec import decode_request, encode_body, request_type, response_type  # noqa: E402
from kcoord.protocol.errors import ErrorCode  # noqa: E402
from kcoord.protocol.responses import build  # noqa: E402


def _per_call_us(fn: Callable[[], Any], seconds: float) -> float:
    """Best of 5 runs of about ``seconds``/5 each, in µs per call."""
    n = 1
    while True:  # calibrate the batch size
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - start
        if took > seconds / 25 or n >= 1 << 22:
            break
        n *= 2
    best = took / n
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return round(best * 1e6, 3)


def _heartbeat_v4() -> dict[str, Any]:
    return dict(
        group_id="consumer-group-1",
        generation_id=7,
        member_id="rdkafka-0f6c1d9e-3a57-4b2c-8d0e-5f1a2b3c4d5e",
        group_instance_id=None,
    )


def _offset_fetch_v6_request() -> dict[str, Any]:
    return dict(
        group_id="consumer-group-1",
        topics=[dict(name="orders", partition_indexes=list(range(8)))],
        require_stable=True,
    )


def _offset_fetch_v6_response() -> dict[str, Any]:
    return dict(
        throttle_time=0,
        error_code=0,
        topics=[
            dict(
                name="orders",
                partitions=[
                    dict(
                        partition_index=p,
                        committed_offset=100_000 + p,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=0,
                    )
                    for p in range(8)
                ],
            )
        ],
    )


def _offset_commit_v8_request() -> dict[str, Any]:
    return dict(
        group_id="consumer-group-1",
        generation_id_or_member_epoch=3,
        member_id="rdkafka-0f6c1d9e-3a57-4b2c-8d0e-5f1a2b3c4d5e",
        group_instance_id=None,
        topics=[
            dict(
                name="orders",
                partitions=[
                    dict(
                        partition_index=p,
                        committed_offset=1_000_000 + p,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                    for p in range(64)
                ],
            )
        ],
    )


def _offset_commit_v8_response() -> dict[str, Any]:
    return dict(
        throttle_time=0,
        topics=[
            dict(
                name="orders",
                partitions=[dict(partition_index=p, error_code=0) for p in range(64)],
            )
        ],
    )


def _join_group_v9_response() -> dict[str, Any]:
    members = [
        dict(
            member_id=f"rdkafka-{i:04d}-3a57-4b2c-8d0e-5f1a2b3c4d5e",
            group_instance_id=None,
            metadata=b"\x00\x01\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff" + bytes(12),
        )
        for i in range(10)
    ]
    return dict(
        throttle_time=0,
        error_code=0,
        generation_id=4,
        protocol_type="consumer",
        protocol_name="range",
        leader=members[0]["member_id"],
        skip_assignment=False,
        member_id=members[0]["member_id"],
        members=members,
    )


def _metadata_v12_response() -> dict[str, Any]:
    return dict(
        throttle_time=0,
        brokers=[dict(node_id=1, host="broker-1.example.internal", port=9092, rack=None)],
        cluster_id="kcoord-cluster-0001",
        controller_id=1,
        topics=[
            dict(
                error_code=0,
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                is_internal=False,
                partitions=[
                    dict(
                        error_code=0,
                        partition_index=p,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                    for p in range(3)
                ],
                topic_authorized_operations=-2147483648,
            )
            for t in range(10)
        ],
    )


def _fetch_v12_response(record_bytes: int) -> dict[str, Any]:
    return dict(
        throttle_time=0,
        error_code=0,
        session_id=0,
        responses=[
            dict(
                topic="orders",
                partitions=[
                    dict(
                        partition_index=p,
                        error_code=0,
                        high_watermark=10_000,
                        last_stable_offset=10_000,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=bytes(record_bytes),
                    )
                    for p in range(8)
                ],
            )
        ],
    )


# name -> (api key, version, request?, fields)
_ENCODE_CASES: dict[str, tuple[int, int, bool, Callable[[], dict[str, Any]]]] = {
    "offset_fetch_v6_response_8p": (9, 6, False, _offset_fetch_v6_response),
    "offset_commit_v8_response_64p": (8, 8, False, _offset_commit_v8_response),
    "join_group_v9_response_10m": (11, 9, False, _join_group_v9_response),
    "metadata_v12_response_10t_3p": (3, 12, False, _metadata_v12_response),
    "fetch_v12_response_8p_1KiB": (1, 12, False, lambda: _fetch_v12_response(1024)),
    "fetch_v12_response_8p_64KiB": (1, 12, False, lambda: _fetch_v12_response(65536)),
}
_DECODE_CASES: dict[str, tuple[int, int, Callable[[], dict[str, Any]]]] = {
    "heartbeat_v4_request": (12, 4, _heartbeat_v4),
    "offset_fetch_v6_request_8p": (9, 6, _offset_fetch_v6_request),
    "offset_commit_v8_request_64p": (8, 8, _offset_commit_v8_request),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=0.3, help="time per measurement")
    args = parser.parse_args()
    s = args.seconds
    out: dict[str, Any] = {"unit": "us_per_call", "encode": {}, "decode": {}, "build": {}}

    for name, (key, version, is_request, make) in _ENCODE_CASES.items():
        cls = request_type(key, version) if is_request else response_type(key, version)
        fields = make()
        entity = build(cls, **fields)
        kio_encode = fastcodec.kio_encoder(cls)
        assert encode_body(entity) == kio_encode(entity)
        out["encode"][name] = {
            "kio": _per_call_us(lambda kio_encode=kio_encode, e=entity: kio_encode(e), s),
            "fast": _per_call_us(lambda e=entity: encode_body(e), s),
        }
        out["build"][name] = _per_call_us(lambda cls=cls, f=fields: build(cls, **f), s)

    for name, (key, version, make) in _DECODE_CASES.items():
        cls = request_type(key, version)
        raw = fastcodec.kio_encoder(cls)(build(cls, **make()))
        kio_read = entity_reader(cls)
        out["decode"][name] = {
            "kio": _per_call_us(lambda r=kio_read, b=raw: r(b, 0), s),
            "fast": _per_call_us(lambda k=key, v=version, b=raw: decode_request(k, v, b, 0), s),
        }
    _ = (datetime, ErrorCode)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
