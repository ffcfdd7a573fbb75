"""Listeners as Kafka names them: `listeners`, `advertised.listeners`,
`listener.security.protocol.map` and `inter.broker.listener.name`.

`listeners = "PLAINTEXT://127.0.0.1:9092,CLIENT://:9094"` declares one socket per entry; each
entry's name is looked up in the protocol map (`CLIENT:SASL_SSL`), whose default maps every
security protocol's own name to itself. A bare `HOST:PORT` is a listener named PLAINTEXT, which is
what a broker with one plaintext port has always been configured with. Listener names are
case-insensitive (kept upper case), as in Kafka.

This module parses and checks text; it opens no sockets.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class SecurityProtocol(enum.StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SecurityProtocol)


class ListenerConfigError(ValueError):
    """A listener setting that cannot be used as given."""


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket: its name, security protocol and bind address, and the address
    clients are told to use for it (`advertised.listeners`, else the bind address)."""

    name: str
    security_protocol: SecurityProtocol
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def advertised(self) -> tuple[str, int]:
        return self.advertised_host or self.host, self.advertised_port or self.port

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """`NAME:PROTOCOL,...` -> {NAME: protocol}."""
    out: dict[str, SecurityProtocol] = {}
    for item in _items(text):
        name, sep, protocol = item.rpartition(":")
        if not sep or not name:
            raise ListenerConfigError(
                f"listener.security.protocol.map entry {item!r} is not NAME:PROTOCOL"
            )
        try:
            out[name.upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ListenerConfigError(
                f"listener.security.protocol.map: {protocol!r} is not one of "
                f"{', '.join(SecurityProtocol)}"
            ) from None
    return out


def parse_endpoint(text: str) -> tuple[str, str, int]:
    """`NAME://HOST:PORT` or `HOST:PORT` -> (NAME, host, port); NAME is PLAINTEXT when absent
    and an empty host means every interface, as Kafka reads it."""
    name, sep, address = text.strip().partition("://")
    if not sep:
        name, address = SecurityProtocol.PLAINTEXT.value, name
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ListenerConfigError(f"expected [NAME://]HOST:PORT, got {text.strip()!r}")
    if not name:
        raise ListenerConfigError(f"listener {text.strip()!r} has no name")
    return name.upper(), host.strip("[]") or "0.0.0.0", int(port)


def parse_listeners(
    listeners: str,
    protocol_map: str = DEFAULT_PROTOCOL_MAP,
    advertised: str | None = None,
) -> tuple[Listener, ...]:
    """The listeners of `listeners`, in order, with their protocols and advertised addresses."""
    protocols = parse_protocol_map(protocol_map)
    parsed: list[Listener] = []
    for item in _items(listeners):
        name, host, port = parse_endpoint(item)
        if name not in protocols:
            raise ListenerConfigError(
                f"listener {name} has no entry in listener.security.protocol.map"
            )
        if any(other.name == name for other in parsed):
            raise ListenerConfigError(f"listener {name} is declared twice in listeners")
        if port and any(other.port == port for other in parsed):
            raise ListenerConfigError(f"listeners {item!r}: port {port} is used twice")
        parsed.append(Listener(name, protocols[name], host, port))
    if not parsed:
        raise ListenerConfigError("listeners names no listener")
    return tuple(_advertise(parsed, advertised)) if advertised else tuple(parsed)


def _advertise(listeners: list[Listener], advertised: str) -> list[Listener]:
    by_name = {listener.name: listener for listener in listeners}
    for item in _items(advertised):
        name, host, port = parse_endpoint(item)
        if name not in by_name:
            raise ListenerConfigError(
                f"advertised.listeners names {name}, which is not in listeners"
            )
        by_name[name] = replace(by_name[name], advertised_host=host, advertised_port=port)
    return [by_name[listener.name] for listener in listeners]


def inter_broker_listener(listeners: tuple[Listener, ...], name: str | None) -> Listener:
    """The listener other brokers use: the one named, else the first PLAINTEXT one, else the
    first one."""
    if name is not None:
        for listener in listeners:
            if listener.name == name.upper():
                return listener
        raise ListenerConfigError(f"inter.broker.listener.name {name} is not in listeners")
    plaintext = [
        listener
        for listener in listeners
        if listener.security_protocol is SecurityProtocol.PLAINTEXT
    ]
    return (plaintext or list(listeners))[0]


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
