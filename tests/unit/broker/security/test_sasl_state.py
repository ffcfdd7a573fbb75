"""The SASL side of a connection: what it may send in each state, PLAIN, and failures."""

from __future__ import annotations

import pytest

from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.sasl import SaslServerAuthenticator, SaslState
from weir.protocol.apis import ApiKey

USERS = {"alice": "alice-secret"}


def authenticator(*mechanisms: str) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(mechanisms or ("PLAIN",), lambda: USERS, lambda u, m: None)


def test_before_the_handshake_only_api_versions_and_the_handshake_are_allowed() -> None:
    sasl = authenticator()
    assert sasl.allows(ApiKey.API_VERSIONS) and sasl.allows(ApiKey.SASL_HANDSHAKE)
    for api in (ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.SASL_AUTHENTICATE):
        assert not sasl.allows(api)


def test_plain_good_credentials_authenticate() -> None:
    sasl = authenticator()
    assert sasl.handshake("PLAIN", 1)
    assert sasl.allows(ApiKey.SASL_AUTHENTICATE) and not sasl.allows(ApiKey.API_VERSIONS)
    assert sasl.authenticate(b"\0alice\0alice-secret") == b""
    assert sasl.authenticated and sasl.user == "alice"
    assert sasl.allows(ApiKey.FETCH)


@pytest.mark.parametrize(
    "token",
    [
        b"\0alice\0wrong",
        b"\0bob\0alice-secret",
        b"mallory\0alice\0alice-secret",
        b"\0alice",
        b"\0\0",
        b"\0alice\0\xff",
    ],
)
def test_plain_bad_credentials_fail(token: bytes) -> None:
    sasl = authenticator()
    sasl.handshake("PLAIN", 1)
    with pytest.raises(SaslAuthenticationError):
        sasl.authenticate(token)
    assert sasl.state is SaslState.FAILED
    assert sasl.user is None and not sasl.allows(ApiKey.METADATA)


def test_a_mechanism_not_enabled_is_refused() -> None:
    sasl = authenticator("SCRAM-SHA-512")
    assert not sasl.handshake("PLAIN", 1)
    assert sasl.state is SaslState.FAILED


def test_handshake_v0_means_bare_tokens() -> None:
    sasl = authenticator()
    sasl.handshake("PLAIN", 0)
    assert sasl.state is SaslState.AUTHENTICATE_RAW
    assert not sasl.allows(ApiKey.SASL_AUTHENTICATE)
    sasl.authenticate(b"\0alice\0alice-secret")
    assert sasl.authenticated


def test_authenticating_without_a_handshake_fails() -> None:
    sasl = authenticator()
    with pytest.raises(SaslAuthenticationError):
        sasl.authenticate(b"\0alice\0alice-secret")
    assert sasl.state is SaslState.FAILED
