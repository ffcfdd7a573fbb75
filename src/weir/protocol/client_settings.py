"""Kafka client settings as users give them, turned into librdkafka's configuration.

Every weir client (the console commands, the agent, the consumer framework, the Spark source
and sink) takes the same settings, with librdkafka's names: `security.protocol`,
`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`,
`ssl.endpoint.identification.algorithm`, `sasl.mechanism` (or `sasl.mechanisms`),
`sasl.username`, `sasl.password`, and any other librdkafka setting. They come from a Java-style
properties file (`--command-config`, as kafka-*.sh take it), `-X KEY=VALUE` flags (as kcat
takes them), a table of a config file, or Spark options. This module owns the one translation:
properties text and flags parsed, a Java client's names read as librdkafka's
(`sasl.jaas.config`, a PEM truststore, an empty endpoint identification algorithm), the
security protocol checked, and secrets hidden wherever settings are shown.

Pure: text and mappings in, dictionaries out. Reading files is the caller's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: the prefix Spark's Kafka source gives the settings it passes to its client
KAFKA_OPTION_PREFIX = "kafka."
HIDDEN = "[hidden]"

_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:]\s*(.*)$")
#: `username="..."` and `password="..."` in a Java client's sasl.jaas.config
_JAAS_OPTION = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SECRET_NAMES = frozenset({"sasl.jaas.config", "ssl.key.pem", "ssl_key"})


class ClientSettingsError(ValueError):
    """Settings that no client could use; the message names the setting."""


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """A Java-style properties file: `key=value` (or `key: value`) lines, `#`/`!` comments."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = _PROPERTY.match(line)
        if match is None:
            raise ClientSettingsError(f"{source}:{number}: expected KEY=VALUE, got {line!r}")
        out[match.group(1)] = match.group(2)
    return out


def parse_pairs(items: Iterable[str]) -> dict[str, str]:
    """`KEY=VALUE` items (`-X` flags); the value may itself contain `=`."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClientSettingsError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def client_settings(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The layers merged (a later one wins) into librdkafka's configuration: a Java client's
    names translated, the security protocol checked and spelt as librdkafka spells it."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    _translate_jaas(merged)
    _translate_truststore(merged)
    if merged.get("ssl.endpoint.identification.algorithm") == "":
        merged["ssl.endpoint.identification.algorithm"] = "none"  # Java's way to turn it off
    protocol = merged.get("security.protocol")
    if protocol is not None:
        merged["security.protocol"] = _security_protocol(str(protocol))
    return merged


def is_security_setting(name: str) -> bool:
    return name == "security.protocol" or name.startswith(("ssl.", "sasl."))


def options_client_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """The client settings among a flat map of options (Spark's): the security settings by
    their own names, and any setting with the prefix `kafka.` (Spark's Kafka source habit:
    `kafka.security.protocol`), which wins."""
    plain = {k.lower(): v for k, v in options.items() if is_security_setting(k.lower())}
    prefixed = {
        k[len(KAFKA_OPTION_PREFIX) :]: v
        for k, v in options.items()
        if k.lower().startswith(KAFKA_OPTION_PREFIX)
    }
    return client_settings(plain, prefixed)


def is_secret(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_NAMES or lowered.endswith(("password", "secret"))


def redacted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings fit to print or log: every password, secret and private key hidden."""
    return {k: HIDDEN if is_secret(k) else v for k, v in settings.items()}


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """What a client connecting by itself (not through librdkafka) must do: TLS with these
    files, then SASL with this mechanism and these credentials."""

    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    mechanism: str = "GSSAPI"
    username: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> ClientSecurity:
        """From librdkafka's settings (after `client_settings`); other settings are ignored."""
        s = {k: str(v) for k, v in client_settings(settings).items()}
        mechanism = s.get("sasl.mechanism", s.get("sasl.mechanisms", "GSSAPI")).upper()
        security = cls(
            protocol=s.get("security.protocol", "PLAINTEXT"),
            ca_location=s.get("ssl.ca.location"),
            certificate_location=s.get("ssl.certificate.location"),
            key_location=s.get("ssl.key.location"),
            key_password=s.get("ssl.key.password"),
            check_hostname=s.get("ssl.endpoint.identification.algorithm", "https").lower()
            != "none",
            mechanism=mechanism,
            username=s.get("sasl.username"),
            password=s.get("sasl.password"),
        )
        if security.sasl and (security.username is None or security.password is None):
            raise ClientSettingsError(
                f"security.protocol={security.protocol} needs sasl.username and sasl.password"
            )
        return security


def _security_protocol(value: str) -> str:
    protocol = value.strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ClientSettingsError(
            f"security.protocol: expected one of {', '.join(SECURITY_PROTOCOLS)}, got {value!r}"
        )
    return protocol


def _translate_jaas(settings: dict[str, Any]) -> None:
    """A Java client's `sasl.jaas.config` gives its username and password (librdkafka's own
    `sasl.username`/`sasl.password`, when also given, win)."""
    jaas = settings.pop("sasl.jaas.config", None)
    if jaas is None:
        return
    found = {key: re.sub(r"\\(.)", r"\1", value) for key, value in _JAAS_OPTION.findall(jaas)}
    if not found:
        raise ClientSettingsError('sasl.jaas.config: no username="..." or password="..." in it')
    for key, value in found.items():
        settings.setdefault(f"sasl.{key}", value)


def _translate_truststore(settings: dict[str, Any]) -> None:
    """A Java client's PEM truststore is librdkafka's CA file; other stores it cannot read."""
    location = settings.pop("ssl.truststore.location", None)
    kind = str(settings.pop("ssl.truststore.type", "PEM")).upper()
    settings.pop("ssl.truststore.password", None)  # a PEM truststore has none
    if location is None:
        return
    if kind != "PEM":
        raise ClientSettingsError(
            f"ssl.truststore.type={kind}: only PEM truststores are read; give the CA "
            "certificates as a PEM file in ssl.ca.location"
        )
    settings.setdefault("ssl.ca.location", location)
