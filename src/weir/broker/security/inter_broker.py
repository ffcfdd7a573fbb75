"""This broker as a client of the other brokers: every connection it opens to one (follower
fetches, the controller's requests, ISR changes, transaction markers) goes to the other's
inter-broker listener (`inter.broker.listener.name`) and speaks that listener's security, with
Kafka's settings for it:

- TLS (SSL, SASL_SSL): the listener's own `ssl.*` settings. The truststore checks the other
  broker's certificate, the keystore answers a listener that requires client certificates,
  and `ssl.endpoint.identification.algorithm` (`https`, the default, or empty) decides
  whether the certificate must name the host connected to.
- SASL (SASL_PLAINTEXT, SASL_SSL): the mechanism `sasl.mechanism.inter.broker.protocol`, and
  this broker's own user and password from the listener's JAAS setting for that mechanism,
  as a Kafka broker takes them:

      "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" = '''
          org.apache.kafka.common.security.scram.ScramLoginModule required
          username="broker" password="broker-secret";'''

Built once at startup; a setting that cannot work (no credentials, a mechanism the listener
does not offer) stops the broker with SecurityConfigError.
"""

from __future__ import annotations

import asyncio
import functools
import re
import socket
import ssl
import struct
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from weir.broker.config import BrokerConfig
from weir.broker.security.errors import SaslAuthenticationError, SecurityConfigError
from weir.broker.security.listeners import Listener
from weir.broker.security.sasl import PLAIN
from weir.broker.security.sasl_client import (
    PlainClient,
    SaslMechanismClient,
    SaslRequest,
    ScramClient,
    sasl_requests,
)
from weir.broker.security.scram import MECHANISMS
from weir.broker.security.tls import TlsSettings, load_keystore, load_truststore
from weir.protocol.codec import decode_response, encode_request

CLIENT_ID = "weir-inter-broker"
JAAS_SETTING = "sasl.jaas.config"
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SIZE = struct.Struct(">i")

#: sends one request of the SASL exchange and returns the response body
Exchange = Callable[[SaslRequest], Any]


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    listener: Listener
    tls: ssl.SSLContext | None = None
    #: (mechanism, user, password) on a SASL listener
    sasl: tuple[str, str, str] | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> InterBrokerSecurity:
        listener = config.inter_broker_listener
        setting = functools.partial(config.listener_setting, listener.name)
        protocol = listener.security_protocol
        tls = client_context(config, listener, setting) if protocol.uses_tls else None
        sasl = _sasl_credentials(config, listener, setting) if protocol.uses_sasl else None
        return cls(listener, tls, sasl)

    def mechanism_client(self) -> SaslMechanismClient | None:
        if self.sasl is None:
            return None
        mechanism, user, password = self.sasl
        if mechanism == PLAIN:
            return PlainClient(user, password)
        return ScramClient(MECHANISMS[mechanism], user, password)

    def connect(self, address: tuple[str, int], timeout: float) -> socket.socket:
        """A blocking connection, TLS and SASL done (the controller's channels)."""
        sock = socket.create_connection(address, timeout=timeout)
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=address[0])
            client = self.mechanism_client()
            if client is not None:
                run_exchange(sasl_requests(client), functools.partial(_blocking_request, sock))
        except (ssl.SSLError, SaslAuthenticationError) as exc:
            sock.close()
            raise ConnectionError(f"broker at {address[0]}:{address[1]}: {exc}") from exc
        except BaseException:
            sock.close()
            raise
        return sock

    async def open(
        self, address: tuple[str, int]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An asyncio connection with TLS when the listener has it; SASL is the caller's
        (it runs `sasl_requests` on its own request path)."""
        if self.tls is None:
            return await asyncio.open_connection(*address)
        return await asyncio.open_connection(*address, ssl=self.tls, server_hostname=address[0])


def client_context(
    config: BrokerConfig, listener: Listener, setting: Callable[[str], Any]
) -> ssl.SSLContext:
    """The TLS context this broker connects to others with."""
    settings = TlsSettings.for_listener(listener.name, setting)
    where = f"inter-broker listener {listener.name}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    algorithm = str(setting("ssl.endpoint.identification.algorithm") or "")
    context.check_hostname = algorithm.lower() == "https"
    try:
        if settings.truststore_location or settings.truststore_certificates:
            load_truststore(context, settings)
        else:
            context.load_default_certs()
        if settings.keystore_location or settings.keystore_key:
            load_keystore(context, settings, where)
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"{where}: {exc}") from None
    return context


def run_exchange(requests: Generator[SaslRequest, Any, None], send: Exchange) -> None:
    """Drive a SASL exchange to its end with a blocking `send`."""
    step = next(requests)
    while True:
        try:
            step = requests.send(send(step))
        except StopIteration:
            return


def _sasl_credentials(
    config: BrokerConfig, listener: Listener, setting: Callable[[str], Any]
) -> tuple[str, str, str]:
    mechanism = config.sasl_mechanism_inter_broker_protocol.strip().upper()
    where = f"inter-broker listener {listener.name}"
    enabled = [m.strip().upper() for m in str(setting("sasl.enabled.mechanisms")).split(",")]
    if mechanism not in enabled:
        raise SecurityConfigError(
            f"{where}: sasl.mechanism.inter.broker.protocol {mechanism} is not in the "
            f"listener's sasl.enabled.mechanisms ({', '.join(enabled)})"
        )
    key = f"{mechanism.lower()}.{JAAS_SETTING}"
    jaas = config.listener_overrides.get(listener.name, {}).get(key)
    options = dict(_JAAS_OPTION.findall(str(jaas or "")))
    user, password = options.get("username"), options.get("password")
    if not user or not password:
        raise SecurityConfigError(
            f"{where}: this broker's own credentials are missing: set "
            f'listener.name.{listener.name.lower()}.{key} = \'... required username="..." '
            'password="...";\''
        )
    return mechanism, _unescape(user), _unescape(password)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _blocking_request(sock: socket.socket, step: SaslRequest) -> Any:
    api_key, version, body = step
    sock.sendall(encode_request(api_key, version, 1, CLIENT_ID, body))
    (size,) = _SIZE.unpack(_receive(sock, _SIZE.size))
    _, response = decode_response(api_key, version, _receive(sock, size))
    return response


def _receive(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionResetError("the broker closed the connection while authenticating")
        data += chunk
    return bytes(data)
