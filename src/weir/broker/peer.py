"""A connection from this broker to another one, for its own requests (a follower's fetches, a
leader's ISR changes): one request at a time, Kafka framing, reconnected on the next request
after a failure. With an `InterBrokerSecurity` it opens TLS and authenticates with SASL as the
inter-broker listener requires before its first request."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.broker.security.sasl_client import sasl_requests
from weir.protocol.codec import decode_response, encode_request
from weir.protocol.errors import RemoteProtocolError

_SIZE = struct.Struct(">i")


#: how long one request may take before the connection is given up (Kafka's request.timeout.ms)
REQUEST_TIMEOUT_S = 30.0


class PeerConnection:
    def __init__(
        self,
        address: tuple[str, int],
        client_id: str,
        *,
        timeout_s: float = REQUEST_TIMEOUT_S,
        security: InterBrokerSecurity | None = None,
    ) -> None:
        self.address = address
        self._security = security
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return its response body. OSError (TimeoutError after the
        request timeout), IncompleteReadError or RemoteProtocolError on failure (the connection
        is then closed)."""
        async with self._lock:
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancellation that arrives as the request fails, and the caller's task then
                # never learns it was cancelled
                async with asyncio.timeout(self._timeout_s):
                    return await self._exchange(api_key, version, body)
            except BaseException:
                self.close()
                raise

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        if self._writer is None:
            await self._connect()
        return await self._round_trip(api_key, version, body)

    async def _connect(self) -> None:
        security = self._security
        if security is None:
            self._reader, self._writer = await asyncio.open_connection(*self.address)
            return
        self._reader, self._writer = await security.open(self.address)
        client = security.mechanism_client()
        if client is None:
            return
        requests = sasl_requests(client)
        step = next(requests)
        try:
            while True:
                step = requests.send(await self._round_trip(*step))
        except StopIteration:
            return
        except SaslAuthenticationError as exc:
            raise ConnectionError(f"authenticating to {self.address}: {exc}") from exc

    async def _round_trip(self, api_key: int, version: int, body: Any) -> Any:
        assert self._reader is not None and self._writer is not None
        self._correlation += 1
        self._writer.write(
            encode_request(api_key, version, self._correlation, self._client_id, body)
        )
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(_SIZE.size))
        payload = await self._reader.readexactly(size)
        correlation_id, response = decode_response(api_key, version, payload)
        if correlation_id != self._correlation:
            raise RemoteProtocolError(f"response {correlation_id} to request {self._correlation}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
