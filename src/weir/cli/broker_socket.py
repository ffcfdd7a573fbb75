"""A socket to one broker, secured as the client's settings say, for commands that speak the
Kafka protocol directly because librdkafka has no call for what they ask (`weir txn`).

`BrokerConnection` connects, wraps the connection in TLS for SSL and SASL_SSL (the CA file,
the client's certificate and key, the host name checked unless
`ssl.endpoint.identification.algorithm=none`, as librdkafka does), and authenticates for
SASL_PLAINTEXT and SASL_SSL with SaslHandshake v1 and SaslAuthenticate v2: PLAIN, or
SCRAM-SHA-256/512 (RFC 5802; the server's signature is checked too). Every failure to connect,
to shake hands or to authenticate is a `BrokerConnectionError` naming the broker and why; then
it carries the caller's requests, one at a time. `connect_any` tries a list of bootstrap servers
in turn. `nothing_listens` tells the librdkafka commands (`weir.cli.clients`) whether any
bootstrap server takes a TCP connection at all, once librdkafka reports every broker down.
"""

from __future__ import annotations

import base64
import hmac
import itertools
import secrets
import socket
import ssl
import struct
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from weir.broker.config import parse_host_port
from weir.broker.security.scram import GS2_NO_BINDING, MECHANISMS, ScramMechanism
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity
from weir.protocol.codec import decode_response, encode_request

_SIZE = struct.Struct(">i")
#: correlation ids of the authentication exchange, apart from those of the caller's requests
_AUTH_CORRELATION_IDS = 1 << 30

#: how long `nothing_listens` waits for one address to take a connection
PROBE_TIMEOUT_S = 2.0
#: reads a response's bytes (after the size) as (correlation id, body)
Decoder = Callable[[bytes], tuple[int, Any]]


class BrokerConnectionError(ConnectionError):
    """The broker could not be reached, or refused the TLS handshake or the credentials."""


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of `HOST:PORT[,HOST:PORT...]`, as Kafka's clients read
    bootstrap.servers."""
    addresses = []
    for entry in filter(None, (part.strip() for part in bootstrap.split(","))):
        try:
            addresses.append(parse_host_port(entry))
        except ValueError as exc:
            raise BrokerConnectionError(f"bad bootstrap server: {exc}") from None
    if not addresses:
        raise BrokerConnectionError(f"bad bootstrap server {bootstrap!r}: expected HOST:PORT")
    return addresses


class BrokerConnection:
    """One connection to a broker, one request at a time, secured as `security` says.

    `decoders` reads the responses of some (api key, version) pairs in place of the generated
    reader: it takes the response's bytes after the size and gives (correlation id, body)."""

    def __init__(
        self,
        host: str,
        port: int,
        security: ClientSecurity,
        *,
        timeout: float,
        client_id: str,
        decoders: Mapping[tuple[int, int], Decoder] | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        self._client_id = client_id
        self._decoders = decoders or {}
        self._correlation = itertools.count(_AUTH_CORRELATION_IDS)
        self._open_done = False
        self._sock = self._open(host, port, security, timeout)
        self._open_done = True
        self._correlation = itertools.count(1)

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def _open(
        self, host: str, port: int, security: ClientSecurity, timeout: float
    ) -> socket.socket:
        """Connects, wraps in TLS and authenticates; the caller's requests may go at once."""
        where = self.address
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise BrokerConnectionError(f"{where}: cannot connect: {exc.strerror or exc}") from None
        try:
            if security.tls:
                self._sock = _tls_context(security).wrap_socket(self._sock, server_hostname=host)
            if security.sasl:
                _authenticate(self, security)
        except ssl.SSLError as exc:
            self._sock.close()
            raise BrokerConnectionError(f"{where}: TLS handshake failed: {exc}") from None
        except (BrokerConnectionError, OSError) as exc:
            self._sock.close()
            raise BrokerConnectionError(f"{where}: {exc}") from None
        return self._sock

    def call(self, api_key: int, version: int, body: Any) -> Any:
        correlation_id = next(self._correlation)
        try:
            self._sock.sendall(
                encode_request(api_key, version, correlation_id, self._client_id, body)
            )
            (size,) = _SIZE.unpack(self._read(_SIZE.size))
            payload = self._read(size)
        except BrokerConnectionError as exc:
            raise self._named(exc) from None
        except OSError as exc:  # the broker's failure, never to be taken for a closed stdout
            raise self._named(BrokerConnectionError(exc.strerror or str(exc))) from None
        decoder = self._decoders.get((api_key, version))
        if decoder is not None:
            answered, response = decoder(payload)
        else:
            answered, response = decode_response(api_key, version, payload)
        if answered != correlation_id:
            raise BrokerConnectionError(f"response {answered} to request {correlation_id}")
        return response

    def _named(self, exc: BrokerConnectionError) -> BrokerConnectionError:
        """`exc` naming the broker; while connecting, `_open` names it."""
        return BrokerConnectionError(f"{self.address}: {exc}") if self._open_done else exc

    def _read(self, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = self._sock.recv(count - len(data))
            if not chunk:
                raise BrokerConnectionError("the broker closed the connection")
            data += chunk
        return bytes(data)


def connect_any(
    bootstrap: str,
    security: ClientSecurity,
    *,
    timeout: float,
    client_id: str,
    decoders: Mapping[tuple[int, int], Decoder] | None = None,
) -> BrokerConnection:
    """A connection to the first broker of `bootstrap` (`HOST:PORT[,HOST:PORT...]`) that
    answers, each tried in turn as Kafka's tools try their bootstrap servers; when none does,
    a BrokerConnectionError naming each and why."""
    failures = []
    for host, port in bootstrap_addresses(bootstrap):
        try:
            return BrokerConnection(
                host, port, security, timeout=timeout, client_id=client_id, decoders=decoders
            )
        except BrokerConnectionError as exc:
            failures.append(str(exc))
    raise BrokerConnectionError("; ".join(failures))


def nothing_listens(
    bootstrap: str, timeout: float = PROBE_TIMEOUT_S
) -> BrokerConnectionError | None:
    """The error to report when no bootstrap server can be reached at all: every address of
    every one refuses a TCP connection, or has no address. None as soon as one accepts, or is
    merely slow to say (a dropped SYN times out here, which is not a refusal): a broker slow to
    answer is not a dead one."""
    try:
        addresses = bootstrap_addresses(bootstrap)
    except BrokerConnectionError:
        return None  # a form librdkafka reads and we do not (HOST without a port): its call
    failures = []
    for host, port in addresses:
        reason = _refusal(host, port, timeout)
        if reason is None:
            return None
        failures.append(f"{host}:{port}: cannot connect: {reason}")
    return BrokerConnectionError("; ".join(failures))


def _refusal(host: str, port: int, timeout: float) -> str | None:
    """Why nothing at (host, port) takes a connection, or None when something does (or
    might: the attempt timed out)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return exc.strerror or str(exc)
    refused = "no address"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.settimeout(timeout)
            try:
                probe.connect(address)
                return None
            except ConnectionRefusedError as exc:
                refused = exc.strerror or str(exc)
            except OSError:  # unreachable or timed out: not known to be dead
                return None
    return refused


def _tls_context(security: ClientSecurity) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=security.ca_location)
    context.check_hostname = security.check_hostname
    if security.certificate_location is not None:
        context.load_cert_chain(
            security.certificate_location,
            security.key_location,
            password=security.key_password,
        )
    return context


def _authenticate(exchange: BrokerConnection, security: ClientSecurity) -> None:
    handshake = exchange.call(
        ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=security.mechanism)
    )
    if handshake.error_code is not ErrorCode.none:
        offered = ", ".join(handshake.mechanisms) or "none"
        raise BrokerConnectionError(
            f"SASL mechanism {security.mechanism} refused "
            f"({handshake.error_code.name}; the listener offers {offered})"
        )
    if security.mechanism == "PLAIN":
        _send(exchange, f"\0{security.username}\0{security.password}".encode())
        return
    mechanism = MECHANISMS.get(security.mechanism)
    if mechanism is None:
        raise BrokerConnectionError(
            f"SASL mechanism {security.mechanism}: weir txn speaks PLAIN, {', '.join(MECHANISMS)}"
        )
    scram = ScramClient(mechanism, str(security.username), str(security.password))
    server_first = _send(exchange, scram.client_first())
    server_final = _send(exchange, scram.client_final(server_first))
    scram.check_server_final(server_final)


def _send(exchange: BrokerConnection, auth_bytes: bytes) -> bytes:
    response = exchange.call(
        ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=auth_bytes)
    )
    if response.error_code is not ErrorCode.none:
        reason = response.error_message or response.error_code.name
        raise BrokerConnectionError(f"SASL authentication failed: {reason}")
    result: bytes = response.auth_bytes
    return result


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802), without channel binding. Sans-IO:
    each method takes the server's last message and gives the client's next one."""

    def __init__(self, mechanism: ScramMechanism, user: str, password: str) -> None:
        self.mechanism = mechanism
        self.password = password
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.first_bare = f"n={name},r={secrets.token_urlsafe(24)}"
        self._auth_message = b""
        self._salted = b""

    def client_first(self) -> bytes:
        return f"{GS2_NO_BINDING}{self.first_bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attributes = dict(item.split("=", 1) for item in text.split(","))
        nonce = attributes["r"]
        if not nonce.startswith(self.first_bare.split(",r=", 1)[1]):
            raise BrokerConnectionError("SCRAM: the server's nonce does not extend ours")
        salt, iterations = base64.b64decode(attributes["s"]), int(attributes["i"])
        self._salted = self.mechanism.salted_password(self.password, salt, iterations)
        binding = base64.b64encode(GS2_NO_BINDING.encode()).decode()
        without_proof = f"c={binding},r={nonce}"
        self._auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        client_key = self.mechanism.hmac(self._salted, b"Client Key")
        signature = self.mechanism.hmac(self.mechanism.digest(client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check_server_final(self, server_final: bytes) -> None:
        """The server proves it knows the credential; a wrong signature is refused."""
        server_key = self.mechanism.hmac(self._salted, b"Server Key")
        expected = self.mechanism.hmac(server_key, self._auth_message)
        text = server_final.decode()
        if not text.startswith("v=") or not hmac.compare_digest(
            base64.b64decode(text[2:]), expected
        ):
            raise BrokerConnectionError(f"SCRAM: the server's signature is wrong ({text!r})")
