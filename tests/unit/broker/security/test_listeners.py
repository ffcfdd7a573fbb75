"""Listener settings as Kafka writes them, and the broker config built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.broker.config import BrokerConfig
from weir.broker.security.listeners import (
    ListenerConfigError,
    SecurityProtocol,
    inter_broker_listener,
    parse_listeners,
)


def test_named_listeners_take_their_protocol_from_the_map() -> None:
    listeners = parse_listeners(
        "PLAINTEXT://127.0.0.1:9092,client://:9094,INTERNAL://[::1]:9095",
        "PLAINTEXT:PLAINTEXT,CLIENT:SASL_SSL,INTERNAL:SSL",
    )
    assert [(x.name, x.security_protocol, x.host, x.port) for x in listeners] == [
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092),
        ("CLIENT", SecurityProtocol.SASL_SSL, "0.0.0.0", 9094),
        ("INTERNAL", SecurityProtocol.SSL, "::1", 9095),
    ]
    assert str(listeners[2]) == "INTERNAL://[::1]:9095"


def test_default_map_knows_the_four_protocols() -> None:
    listeners = parse_listeners("PLAINTEXT://h:1,SSL://h:2,SASL_PLAINTEXT://h:3,SASL_SSL://h:4")
    assert [x.security_protocol.value for x in listeners] == [
        "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL",
    ]  # fmt: skip
    assert listeners[1].security_protocol.uses_tls and not listeners[1].security_protocol.uses_sasl
    assert listeners[3].security_protocol.uses_tls and listeners[3].security_protocol.uses_sasl


@pytest.mark.parametrize(
    ("listeners", "protocol_map", "message"),
    [
        ("CLIENT://:9094", "PLAINTEXT:PLAINTEXT", "no entry"),
        ("PLAINTEXT://:1,PLAINTEXT://:2", "PLAINTEXT:PLAINTEXT", "twice"),
        ("PLAINTEXT://:1,SSL://:1", "PLAINTEXT:PLAINTEXT,SSL:SSL", "port 1"),
        ("PLAINTEXT://nowhere", "PLAINTEXT:PLAINTEXT", "HOST:PORT"),
        ("", "PLAINTEXT:PLAINTEXT", "no listener"),
        ("A://:1", "A:TLS", "not one of"),
    ],
)
def test_bad_listeners_are_refused(listeners: str, protocol_map: str, message: str) -> None:
    with pytest.raises(ListenerConfigError, match=message):
        parse_listeners(listeners, protocol_map)


def test_advertised_listeners_match_by_name() -> None:
    listeners = parse_listeners(
        "PLAINTEXT://:9092,SSL://:9093", advertised="SSL://broker.example:19093"
    )
    assert listeners[0].advertised == ("0.0.0.0", 9092)
    assert listeners[1].advertised == ("broker.example", 19093)
    with pytest.raises(ListenerConfigError, match="not in listeners"):
        parse_listeners("PLAINTEXT://:9092", advertised="SSL://x:1")


def test_inter_broker_listener_defaults_to_the_first_plaintext_one() -> None:
    listeners = parse_listeners("SSL://:9093,PLAINTEXT://:9092,INTERNAL://:9091",
                                "SSL:SSL,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT")  # fmt: skip
    assert inter_broker_listener(listeners, None).name == "PLAINTEXT"
    assert inter_broker_listener(listeners, "internal").name == "INTERNAL"
    with pytest.raises(ListenerConfigError):
        inter_broker_listener(listeners, "NOPE")
    only_tls = parse_listeners("SSL://:9093")
    assert inter_broker_listener(only_tls, None).name == "SSL"


def test_a_bare_host_port_is_one_plaintext_listener_as_before() -> None:
    config = BrokerConfig.from_settings({"listeners": "127.0.0.1:9000"})
    assert (config.listen_host, config.listen_port, config.listeners) == ("127.0.0.1", 9000, None)
    (only,) = config.endpoints
    assert (only.name, only.security_protocol, only.port) == ("PLAINTEXT", "PLAINTEXT", 9000)
    assert config.broker_configs()["listeners"] == "PLAINTEXT://127.0.0.1:9000"


def test_listen_flag_replaces_the_listeners_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('listeners = "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"\n')
    assert len(BrokerConfig.load(path).endpoints) == 2
    config = BrokerConfig.load(path, listen_host="127.0.0.2", listen_port=7000)
    assert [(x.name, x.host, x.port) for x in config.endpoints] == [
        ("PLAINTEXT", "127.0.0.2", 7000)
    ]


def test_listener_overrides_and_plain_users_from_toml_tables(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        'listeners = "PLAINTEXT://:9092,CLIENT://:9094"\n'
        '"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT"\n'
        '"sasl.enabled.mechanisms" = "SCRAM-SHA-512"\n'
        '[sasl.plain.users]\nalice = "alice-secret"\n"svc.app" = "x"\n'
        '[listener.name.client]\n"sasl.enabled.mechanisms" = "PLAIN"\n'
    )
    config = BrokerConfig.load(path)
    assert config.listener_setting("CLIENT", "sasl.enabled.mechanisms") == "PLAIN"
    assert config.listener_setting("PLAINTEXT", "sasl.enabled.mechanisms") == "SCRAM-SHA-512"
    assert config.listener_setting("CLIENT", "sasl.plain.users") == {
        "alice": "alice-secret", "svc.app": "x",
    }  # fmt: skip
    shown = config.broker_configs()
    assert "sasl.plain.users" not in shown and not any("secret" in v for v in shown.values())


def test_overrides_for_an_unknown_listener_are_refused() -> None:
    with pytest.raises(ListenerConfigError, match="names no listener"):
        BrokerConfig.from_settings({"listener.name.nope.ssl.client.auth": "required"})
