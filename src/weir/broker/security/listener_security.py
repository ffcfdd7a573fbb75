"""Each listener's security, built once at startup from its settings: the TLS context of an
SSL or SASL_SSL listener, the SASL mechanisms and PLAIN users of a SASL one; and a new
connection's `Session`."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from weir.broker.config import BrokerConfig
from weir.broker.security.errors import SecurityConfigError
from weir.broker.security.listeners import Listener
from weir.broker.security.sasl import SUPPORTED_MECHANISMS, SaslServerAuthenticator
from weir.broker.security.scram import CredentialLookup
from weir.broker.security.session import USER_TYPE, KafkaPrincipal, Session
from weir.broker.security.tls import TlsSettings, distinguished_name, server_context

#: how a listener reads one setting, its own override first
SettingLookup = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    listener: Listener
    tls: ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, listener: Listener, setting: SettingLookup) -> ListenerSecurity:
        protocol = listener.security_protocol
        tls = None
        if protocol.uses_tls:
            tls = server_context(TlsSettings.for_listener(listener.name, setting))
        if not protocol.uses_sasl:
            return cls(listener, tls)
        mechanisms = _mechanisms(listener, str(setting("sasl.enabled.mechanisms")))
        users = dict(setting("sasl.plain.users") or {})
        return cls(listener, tls, mechanisms, users)

    def new_session(self, client_address: str, credentials: CredentialLookup) -> Session:
        sasl = None
        if self.listener.security_protocol.uses_sasl:
            sasl = SaslServerAuthenticator(
                self.sasl_mechanisms, lambda: self.plain_users, credentials
            )
        return Session(self.listener, client_address, sasl=sasl)

    @staticmethod
    def certificate_principal(certificate: dict[str, Any] | None) -> KafkaPrincipal | None:
        """`User:<subject DN>` for a verified client certificate (Kafka's DEFAULT mapping)."""
        name = distinguished_name(certificate) if certificate else None
        return KafkaPrincipal(USER_TYPE, name) if name else None


def listener_securities(config: BrokerConfig) -> list[ListenerSecurity]:
    """Each listener's security, in order; SecurityConfigError if one cannot be used."""
    endpoints = config.endpoints
    return [
        ListenerSecurity.build(listener, functools.partial(config.listener_setting, listener.name))
        for listener in endpoints
    ]


def _mechanisms(listener: Listener, text: str) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unknown = [m for m in names if m not in SUPPORTED_MECHANISMS]
    if unknown or not names:
        raise SecurityConfigError(
            f"listener {listener.name}: sasl.enabled.mechanisms may name "
            f"{', '.join(SUPPORTED_MECHANISMS)}, not {text!r}"
        )
    return names
