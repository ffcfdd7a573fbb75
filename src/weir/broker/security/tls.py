"""TLS for SSL and SASL_SSL listeners with the stdlib `ssl` module: the server context from
Kafka's `ssl.*` settings (PEM only), and the principal of a client certificate.

Key material comes as PEM, as Kafka takes it with `ssl.keystore.type = PEM`: either
`ssl.keystore.location`, one file holding the private key and the certificate chain, or
`ssl.keystore.certificate.chain` and `ssl.keystore.key` holding the same as text; an encrypted
key is opened with `ssl.key.password`. Client certificates are checked against
`ssl.truststore.location` (a PEM file of CA certificates) or `ssl.truststore.certificates`
(the same as text) when `ssl.client.auth` is `required` or `requested`.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.broker.security.errors import SecurityConfigError

CLIENT_AUTH = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
#: RFC 2253 keywords of the attributes Java's X500Principal names (others keep their long name)
_DN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_TLS_SETTINGS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.cipher.suites",
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsSettings:
    listener: str
    keystore_type: str = "PEM"
    keystore_location: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    key_password: str | None = None
    truststore_type: str = "PEM"
    truststore_location: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    cipher_suites: str | None = None

    @classmethod
    def for_listener(cls, listener: str, setting: Callable[[str], Any]) -> TlsSettings:
        """The settings one listener sees (`setting(name)` applies its overrides)."""
        values = {name: setting(name) for name in _TLS_SETTINGS}
        return cls(
            listener=listener,
            **{
                name.removeprefix("ssl.").replace(".", "_"): str(value)
                for name, value in values.items()
                if value is not None
            },
        )


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context for one listener; SecurityConfigError names what is wrong."""
    where = f"listener {settings.listener}"
    for kind in (settings.keystore_type, settings.truststore_type):
        if kind.upper() != "PEM":
            raise SecurityConfigError(
                f"{where}: only PEM key and trust stores are read, not {kind}"
            )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(context, settings.enabled_protocols, where)
    try:
        load_keystore(context, settings, where)
        _load_truststore(context, settings, where)
        if settings.cipher_suites:
            context.set_ciphers(":".join(s.strip() for s in settings.cipher_suites.split(",")))
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"{where}: {exc}") from None
    return context


def _set_versions(context: ssl.SSLContext, text: str, where: str) -> None:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in TLS_VERSIONS]
    if unknown or not names:
        raise SecurityConfigError(
            f"{where}: ssl.enabled.protocols may name {', '.join(TLS_VERSIONS)}, not {text!r}"
        )
    versions = sorted(TLS_VERSIONS[v] for v in names)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]


def load_keystore(context: ssl.SSLContext, settings: TlsSettings, where: str) -> None:
    if settings.keystore_location:
        context.load_cert_chain(settings.keystore_location, password=settings.key_password)
        return
    if not (settings.keystore_certificate_chain and settings.keystore_key):
        raise SecurityConfigError(
            f"{where}: TLS needs ssl.keystore.location, or ssl.keystore.certificate.chain "
            "and ssl.keystore.key"
        )
    # ssl loads keys from files only: a private directory holds the text for the moment it takes
    with tempfile.TemporaryDirectory(prefix="weir-tls-") as directory:
        chain, key = Path(directory, "chain.pem"), Path(directory, "key.pem")
        for path, text in ((chain, settings.keystore_certificate_chain),
                           (key, settings.keystore_key)):  # fmt: skip
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as out:
                out.write(text)
        context.load_cert_chain(chain, key, password=settings.key_password)


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings, where: str) -> None:
    mode = CLIENT_AUTH.get(settings.client_auth.lower())
    if mode is None:
        raise SecurityConfigError(
            f"{where}: ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}, "
            f"not {settings.client_auth!r}"
        )
    if mode is ssl.CERT_NONE:
        return
    if not load_truststore(context, settings):
        raise SecurityConfigError(
            f"{where}: ssl.client.auth={settings.client_auth} needs ssl.truststore.location "
            "or ssl.truststore.certificates"
        )
    context.verify_mode = mode


def load_truststore(context: ssl.SSLContext, settings: TlsSettings) -> bool:
    """Trust the truststore's CA certificates; False if none is configured."""
    if settings.truststore_location:
        context.load_verify_locations(cafile=settings.truststore_location)
    elif settings.truststore_certificates:
        context.load_verify_locations(cadata=settings.truststore_certificates)
    else:
        return False
    return True


def distinguished_name(certificate: dict[str, Any]) -> str | None:
    """The subject of a certificate as Kafka's default principal mapping writes it (RFC 2253,
    most specific attribute first: `CN=alice,OU=eng,O=Acme,C=GB`); None without a subject."""
    subject = certificate.get("subject")
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_DN_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and len(out) > 1:
        out = out[:-1] + "\\ "
    return out
