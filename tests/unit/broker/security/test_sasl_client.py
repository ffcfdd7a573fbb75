"""The broker's own SASL client on bytes alone: RFC 7677's published SCRAM-SHA-256 exchange from
the client's side, a full exchange against the broker's SCRAM and PLAIN servers, the requests
that carry it, and the inter-broker settings read from Kafka's names."""

from __future__ import annotations

import base64

import pytest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from weir.broker.config import BrokerConfig
from weir.broker.security.errors import SaslAuthenticationError, SecurityConfigError
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.broker.security.sasl import PlainServer
from weir.broker.security.sasl_client import PlainClient, ScramClient, sasl_requests
from weir.broker.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramServer
from weir.protocol.apis import ApiKey

RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
    'password="broker-secret";'
)


def test_the_client_side_of_rfc_7677s_exchange() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce=RFC_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.evaluate(RFC_SERVER_FINAL) is None


def test_a_wrong_server_signature_fails_the_exchange() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce=RFC_NONCE)
    client.first()
    client.evaluate(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="signature"):
        client.evaluate(b"v=" + base64.b64encode(b"\0" * 32))


def test_a_server_nonce_that_does_not_extend_ours_fails() -> None:
    client = ScramClient(SCRAM_SHA_512, "user", "pencil", nonce="abc")
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        client.evaluate(b"r=xyz123,s=AAAA,i=4096")


@pytest.mark.parametrize(("password", "accepted"), [("broker-secret", True), ("wrong", False)])
def test_an_exchange_with_the_brokers_scram_server(password: str, accepted: bool) -> None:
    salt = b"0123456789abcdef"
    stored = SCRAM_SHA_512.credential(
        SCRAM_SHA_512.salted_password("broker-secret", salt, 4096), salt, 4096
    )
    server = ScramServer(SCRAM_SHA_512, lambda user, _: stored if user == "broker" else None)
    client = ScramClient(SCRAM_SHA_512, "broker", password)
    token = client.first()
    if not accepted:
        with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
            server.evaluate(client.evaluate(server.evaluate(token)) or b"")
        return
    final = client.evaluate(server.evaluate(token))
    assert final is not None
    assert client.evaluate(server.evaluate(final)) is None
    assert server.authorization_id == "broker"


def test_plain_is_one_message() -> None:
    server = PlainServer({"broker": "broker-secret"})
    client = PlainClient("broker", "broker-secret")
    assert server.evaluate(client.first()) == b""
    assert server.authorization_id == "broker"
    assert client.evaluate(b"") is None


def test_the_requests_of_an_exchange_and_a_refusal() -> None:
    requests = sasl_requests(PlainClient("broker", "broker-secret"))
    api_key, version, handshake = next(requests)
    assert (api_key, version, handshake.mechanism) == (ApiKey.SASL_HANDSHAKE, 1, "PLAIN")
    api_key, version, authenticate = requests.send(
        SaslHandshakeResponse(error_code=0, mechanisms=("PLAIN",))
    )
    assert (api_key, authenticate.auth_bytes) == (
        ApiKey.SASL_AUTHENTICATE,
        b"\0broker\0broker-secret",
    )
    refusal = SaslAuthenticateResponse(
        error_code=58, error_message="Invalid username or password", auth_bytes=b"",
        session_lifetime=0,
    )  # fmt: skip
    with pytest.raises(SaslAuthenticationError, match="Invalid username"):
        requests.send(refusal)


def test_a_mechanism_the_other_broker_does_not_offer_is_refused() -> None:
    requests = sasl_requests(ScramClient(SCRAM_SHA_512, "broker", "secret"))
    next(requests)
    with pytest.raises(SaslAuthenticationError, match="offers PLAIN"):
        requests.send(SaslHandshakeResponse(error_code=33, mechanisms=("PLAIN",)))


def sasl_cluster(**extra: object) -> BrokerConfig:
    return BrokerConfig.from_settings({
        "listeners": "INTERNAL://127.0.0.1:9093,CLIENT://127.0.0.1:9094",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CLIENT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        **extra,
    })  # fmt: skip


def test_the_brokers_own_credentials_come_from_the_listeners_jaas_setting() -> None:
    config = sasl_cluster(**{"listener.name.internal.scram-sha-512.sasl.jaas.config": JAAS})
    security = InterBrokerSecurity.from_config(config)
    assert security.listener.name == "INTERNAL"
    assert security.sasl == ("SCRAM-SHA-512", "broker", "broker-secret")
    assert security.tls is None
    assert "sasl.jaas.config" not in " ".join(config.broker_configs())


def test_missing_credentials_stop_the_broker_with_a_clear_error() -> None:
    with pytest.raises(SecurityConfigError, match=r"listener\.name\.internal\.scram-sha-512"):
        InterBrokerSecurity.from_config(sasl_cluster())


def test_an_inter_broker_mechanism_the_listener_does_not_offer_is_refused() -> None:
    config = sasl_cluster(**{
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
    })  # fmt: skip
    with pytest.raises(SecurityConfigError, match=r"not in the listener's sasl\.enabled"):
        InterBrokerSecurity.from_config(config)


def test_security_inter_broker_protocol_names_the_listener_as_in_kafka() -> None:
    config = BrokerConfig.from_settings({
        "listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
        "security.inter.broker.protocol": "SSL",
    })  # fmt: skip
    assert config.inter_broker_listener.name == "SSL"
    with pytest.raises(ValueError, match="not both"):
        BrokerConfig.from_settings({
            "listeners": "SSL://127.0.0.1:9093",
            "security.inter.broker.protocol": "SSL",
            "inter.broker.listener.name": "SSL",
        })  # fmt: skip
