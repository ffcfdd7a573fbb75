"""The SCRAM credential file: salted keys only, owner-only, changes seen across processes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from weir.broker.security.credentials import Deletion, ScramCredentialStore, Upsertion
from weir.broker.security.errors import SecurityConfigError
from weir.broker.security.listener_security import ListenerSecurity
from weir.broker.security.listeners import parse_listeners
from weir.broker.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramMechanism


def upsertion(user: str, password: str, mechanism: ScramMechanism = SCRAM_SHA_512) -> Upsertion:
    salt = os.urandom(16)
    salted = mechanism.salted_password(password, salt, 4096)
    return Upsertion(user, mechanism, mechanism.credential(salted, salt, 4096))


def test_credentials_are_kept_salted_owner_only_and_survive_a_new_store(tmp_path: Path) -> None:
    store = ScramCredentialStore(tmp_path)
    store.alter([upsertion("alice", "alice-secret"), upsertion("bob", "b", SCRAM_SHA_256)], [])
    text = store.path.read_text()
    assert "alice-secret" not in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    entry = json.loads(text)["users"]["alice"]["SCRAM-SHA-512"]
    assert (
        entry.startswith("salt=") and ",stored_key=" in entry and entry.endswith(",iterations=4096")
    )
    again = ScramCredentialStore(tmp_path)
    assert again.lookup("alice", SCRAM_SHA_512) == store.lookup("alice", SCRAM_SHA_512)
    assert again.lookup("alice", SCRAM_SHA_256) is None
    assert again.lookup("bob", SCRAM_SHA_256) is not None


def test_changes_by_another_store_are_seen_and_deletions_drop_empty_users(tmp_path: Path) -> None:
    broker_side = ScramCredentialStore(tmp_path)
    assert broker_side.users() == {}
    ScramCredentialStore(tmp_path).alter([upsertion("carol", "c")], [])
    assert broker_side.lookup("carol", SCRAM_SHA_512) is not None
    ScramCredentialStore(tmp_path).alter([], [Deletion("carol", SCRAM_SHA_512)])
    assert "carol" not in broker_side.users()


def test_a_tls_listener_without_a_key_does_not_start() -> None:
    (listener,) = parse_listeners("SSL://127.0.0.1:0")
    settings = {"ssl.client.auth": "none", "ssl.enabled.protocols": "TLSv1.2,TLSv1.3"}
    with pytest.raises(SecurityConfigError, match=r"ssl\.keystore\.location"):
        ListenerSecurity.build(listener, settings.get)
    (sasl,) = parse_listeners("SASL_PLAINTEXT://127.0.0.1:0")
    with pytest.raises(SecurityConfigError, match=r"sasl\.enabled\.mechanisms"):
        ListenerSecurity.build(sasl, {"sasl.enabled.mechanisms": "GSSAPI"}.get)
