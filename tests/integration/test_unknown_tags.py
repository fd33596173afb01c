"""A newer client's tagged fields are skipped, never a closed connection (issue 19).

Every flexible request version kcoord accepts goes to a real broker with a tagged field no
schema declares in the request header and in every struct of its body; each must be answered
(with whatever the request itself deserves) on the same connection, in order.
"""

from __future__ import annotations

import struct

from kcoord.protocol.apis import ApiKey

from .harness import BrokerProcess
from .rawclient import RawClient
from .samples import flexible_versions, tagged_body

# A tagged field in the request header too (tag 9, two bytes).
_HEADER_TAGS = bytes([1, 9, 2]) + b"hi"


def test_unknown_tags_on_every_flexible_request_are_skipped(broker: BrokerProcess) -> None:
    # SaslAuthenticate out of turn closes the connection after failure_delay_s: it goes last,
    # so that the answers after it do not race that delay.
    versions = sorted(flexible_versions(), key=lambda v: v[0] == ApiKey.SASL_AUTHENTICATE)
    assert len(versions) > 40
    cid = b"newer-client"
    with RawClient(broker.port, timeout=15) as client:
        for correlation, (api_key, version) in enumerate(versions, start=1):
            _plain, body = tagged_body(api_key, version)
            header = struct.pack(">hhih", api_key, version, correlation, len(cid)) + cid
            payload = header + _HEADER_TAGS + body
            client.send_raw(struct.pack(">i", len(payload)) + payload)
            try:
                frame = client.recv_frame()
            except (ConnectionError, TimeoutError) as e:
                raise AssertionError(
                    f"api {ApiKey(api_key).name} v{version} with unknown tags: {e!r}\n{broker.log()}"
                ) from e
            assert struct.unpack_from(">i", frame)[0] == correlation, (api_key, version)
    assert "closing connection" not in broker.log()
