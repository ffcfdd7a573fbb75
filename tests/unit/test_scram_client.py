"""The SCRAM client of `weir txn`'s own connections against the broker's SCRAM server, on
bytes alone: a right password authenticates both ways, a wrong one is refused, and a server
that does not know the credential is caught by its signature."""

from __future__ import annotations

import base64

import pytest

from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramMechanism, ScramServer
from weir.cli.broker_socket import BrokerConnectionError, ScramClient

SALT = b"0123456789abcdef"


def server_for(mechanism: ScramMechanism, password: str) -> ScramServer:
    stored = mechanism.credential(mechanism.salted_password(password, SALT, 4096), SALT, 4096)
    return ScramServer(mechanism, lambda user, _: stored if user == "us,er=" else None)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_the_right_password_authenticates_and_the_server_proves_itself(
    mechanism: ScramMechanism,
) -> None:
    server = server_for(mechanism, "pencil")
    client = ScramClient(mechanism, "us,er=", "pencil")
    server_first = server.evaluate(client.client_first())
    client.check_server_final(server.evaluate(client.client_final(server_first)))
    assert server.complete and server.authorization_id == "us,er="


def test_a_wrong_password_is_refused_by_the_server() -> None:
    server = server_for(SCRAM_SHA_512, "pencil")
    client = ScramClient(SCRAM_SHA_512, "us,er=", "crayon")
    server_first = server.evaluate(client.client_first())
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(client.client_final(server_first))


def test_a_server_without_the_credential_fails_its_signature() -> None:
    client = ScramClient(SCRAM_SHA_512, "us,er=", "pencil")
    server = server_for(SCRAM_SHA_512, "pencil")
    client.client_final(server.evaluate(client.client_first()))
    forged = b"v=" + base64.b64encode(b"\0" * 64)
    with pytest.raises(BrokerConnectionError, match="signature"):
        client.check_server_final(forged)


def test_a_server_nonce_that_does_not_extend_the_clients_is_refused() -> None:
    client = ScramClient(SCRAM_SHA_512, "user", "pencil")
    with pytest.raises(BrokerConnectionError, match="nonce"):
        client.client_final(b"r=someone-elses-nonce,s=MDEyMzQ1Njc4OWFiY2RlZg==,i=4096")
