"""Client security settings as users write them, turned into librdkafka's configuration: the
properties file, -X pairs, a Java client's names, Spark's options, secrets hidden; and what the
agent, the consumer framework and the Spark options make of them."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from confluent_kafka import Producer

from weir.agent.config import load_config
from weir.consumer.settings import ConsumerSettings
from weir.pipeline.offsets import OffsetOptionError
from weir.pipeline.options import client_options
from weir.protocol.client_settings import (
    ClientSecurity,
    ClientSettingsError,
    client_settings,
    options_client_settings,
    parse_pairs,
    parse_properties,
    redacted,
)

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="carol" password="pa\\"ss=word";'
)


def test_a_properties_file_as_kafka_tools_take_it() -> None:
    text = (
        "# client.properties\n! another comment\n\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "  ssl.ca.location = /etc/weir/ca.pem  \n"
        "sasl.password=a=b\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.ca.location": "/etc/weir/ca.pem",
        "sasl.password": "a=b",
    }


def test_a_line_that_is_not_a_setting_is_named_by_file_and_line() -> None:
    with pytest.raises(ClientSettingsError, match=r"client.properties:2: expected KEY=VALUE"):
        parse_properties("security.protocol=SSL\njust words\n", "client.properties")


def test_pairs_keep_equals_signs_in_values_and_refuse_a_missing_one() -> None:
    assert parse_pairs(["sasl.password=x=y", "ssl.key.password="]) == {
        "sasl.password": "x=y",
        "ssl.key.password": "",
    }
    with pytest.raises(ClientSettingsError, match=r"expected KEY=VALUE, got 'sasl\.username'"):
        parse_pairs(["sasl.username"])


def test_a_java_jaas_config_gives_username_and_password_and_later_layers_win() -> None:
    from_file = {"security.protocol": "sasl_ssl", "sasl.jaas.config": JAAS}
    assert client_settings(from_file) == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "carol",
        "sasl.password": 'pa"ss=word',
    }
    flags = {"sasl.username": "dave"}
    assert client_settings(from_file, flags)["sasl.username"] == "dave"
    with pytest.raises(ClientSettingsError, match=r"sasl\.jaas\.config"):
        client_settings({"sasl.jaas.config": "LoginModule required;"})


def test_java_names_for_tls_become_librdkafkas() -> None:
    ca = ssl.get_default_verify_paths().openssl_cafile  # any PEM file of CA certificates
    java = {
        "security.protocol": "SSL",
        "ssl.truststore.location": ca,
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
    }
    settings = client_settings(java)
    assert settings == {
        "security.protocol": "SSL",
        "ssl.ca.location": ca,
        "ssl.endpoint.identification.algorithm": "none",
    }
    Producer(settings)  # librdkafka accepts every name and value
    with pytest.raises(ClientSettingsError, match=r"only PEM truststores"):
        client_settings({"ssl.truststore.location": "/x.jks", "ssl.truststore.type": "JKS"})


def test_an_unknown_security_protocol_is_refused_by_name() -> None:
    with pytest.raises(ClientSettingsError, match=r"security\.protocol: expected one of .*'TLS'"):
        client_settings({"security.protocol": "TLS"})


def test_spark_options_security_names_and_the_kafka_prefix() -> None:
    options = {
        "subscribe": "a",
        "security.protocol": "SASL_SSL",
        "sasl.username": "carol",
        "kafka.sasl.username": "dave",
        "kafka.sasl.jaas.config": JAAS,
        "kafka.client.id": "job",
    }
    assert options_client_settings(options) == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "dave",
        "sasl.password": 'pa"ss=word',
        "client.id": "job",
    }
    assert client_options({**options, "bootstrap.servers": "h:1"})["sasl.username"] == "dave"
    with pytest.raises(OffsetOptionError, match=r"security\.protocol"):
        client_options({"bootstrap.servers": "h:1", "kafka.security.protocol": "TLS"})


def test_secrets_are_hidden_wherever_settings_are_shown() -> None:
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.username": "carol",
        "sasl.password": "carol-secret",
        "ssl.key.password": "key-secret",
        "sasl.jaas.config": JAAS,
        "sasl.oauthbearer.client.secret": "s",
    }
    assert redacted(settings) == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "carol",
        "sasl.password": "[hidden]",
        "ssl.key.password": "[hidden]",
        "sasl.jaas.config": "[hidden]",
        "sasl.oauthbearer.client.secret": "[hidden]",
    }


def test_client_security_for_connections_made_without_librdkafka() -> None:
    security = ClientSecurity.of(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "scram-sha-512",
            "sasl.jaas.config": JAAS,
            "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert (security.tls, security.sasl, security.mechanism) == (True, True, "SCRAM-SHA-512")
    assert (security.username, security.password) == ("carol", 'pa"ss=word')
    assert (security.ca_location, security.check_hostname) == ("/ca.pem", False)
    assert not ClientSecurity.of({}).tls and not ClientSecurity.of({}).sasl
    with pytest.raises(ClientSettingsError, match=r"needs sasl\.username and sasl\.password"):
        ClientSecurity.of({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u"})


def test_the_agent_reads_its_producer_table_and_shows_no_secret(tmp_path: Path) -> None:
    config_file = tmp_path / "agent.toml"
    config_file.write_text(
        'bootstrap_server = "broker:9094"\n[producer]\n"security.protocol" = "SASL_SSL"\n'
        f'"sasl.mechanism" = "SCRAM-SHA-512"\n"sasl.jaas.config" = \'{JAAS}\'\n'
        '"linger.ms" = 20\n'
    )
    config = load_config(config_file)
    assert config.producer["sasl.username"] == "carol"
    assert config.producer["sasl.password"] == 'pa"ss=word'
    assert config.producer["linger.ms"] == 20
    assert config.security() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol",
        "sasl.password": "[hidden]",
    }


def test_the_consumer_framework_gives_every_client_the_translated_settings() -> None:
    settings = ConsumerSettings(
        bootstrap_servers="broker:9094",
        group_id="g",
        topics=("t",),
        client_config={"security.protocol": "sasl_ssl", "sasl.jaas.config": JAAS},
    )
    for config in (settings.consumer_config(), settings.producer_config(), settings.admin_config()):
        assert config["security.protocol"] == "SASL_SSL"
        assert (config["sasl.username"], config["sasl.password"]) == ("carol", 'pa"ss=word')
        assert "sasl.jaas.config" not in config
    with pytest.raises(ValueError, match=r"security\.protocol"):
        ConsumerSettings(bootstrap_servers="b", group_id="g", topics=("t",),
                         client_config={"security.protocol": "SASL"})  # fmt: skip
