"""SCRAM credentials: the interface every store offers (`CredentialStore`), and the store of a
single-node broker, kept in its metadata directory (a cluster keeps them in ZooKeeper:
cluster_credentials.py).

On disk: `scram-credentials.json` in the first log directory, readable by its owner only,
holding what Kafka keeps in ZooKeeper under /config/users/<user>, one entry per user:

    {"version": 1, "users": {"alice": {"SCRAM-SHA-512": "salt=...,stored_key=...,
                                                         server_key=...,iterations=8192"}}}

Only salts, iteration counts, StoredKeys and ServerKeys are kept, never a password or a salted
password. Every change is written whole (temp file, fsync, rename) under an exclusive lock on
`scram-credentials.json.lock`, so `weir user` can add users while the broker is stopped, or
running: the broker reads the file again when it has changed.

Thread-safety (docs/threads.md): `lookup` and `users` may run on the event loop (they stat the file
and read it only when it changed); `alter` blocks on the disk and must run in an executor.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from weir import diskio
from weir.broker.security.scram import MECHANISMS, ScramCredential, ScramMechanism
from weir.durable import write_atomically

CREDENTIALS_FILE = "scram-credentials.json"
LOCK_SUFFIX = ".lock"
FORMAT_VERSION = 1

Credentials = dict[str, dict[str, ScramCredential]]


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: ScramMechanism
    credential: ScramCredential


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: ScramMechanism


class CredentialStore(Protocol):
    """Where SCRAM credentials live. `lookup` and `users` may run on the event loop; `alter`
    blocks (disk, ZooKeeper) and runs in an executor."""

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None: ...

    def users(self) -> Credentials: ...

    def alter(self, upsertions: Iterable[Upsertion], deletions: Iterable[Deletion]) -> None: ...


class ScramCredentialStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / CREDENTIALS_FILE
        self._lock_path = data_dir / (CREDENTIALS_FILE + LOCK_SUFFIX)
        self._write_lock = threading.Lock()
        self._users: Credentials = {}
        self._seen: tuple[int, int, int] | None = None

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.users().get(user, {}).get(mechanism.name)

    def users(self) -> Credentials:
        """user -> mechanism name -> credential, as the file holds them now."""
        self._refresh()
        return self._users

    def alter(self, upsertions: Iterable[Upsertion], deletions: Iterable[Deletion]) -> None:
        """Apply the changes durably, all or none. Deleting what is not there is ignored
        (the caller reports it)."""
        with self._write_lock, _file_lock(self._lock_path):
            self._refresh()
            users = {user: dict(entries) for user, entries in self._users.items()}
            for deletion in deletions:
                entries = users.get(deletion.user, {})
                entries.pop(deletion.mechanism.name, None)
                if not entries:
                    users.pop(deletion.user, None)
            for upsertion in upsertions:
                users.setdefault(upsertion.user, {})[upsertion.mechanism.name] = (
                    upsertion.credential
                )
            self._save(users)

    def _refresh(self) -> None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self._users, self._seen = {}, None
            return
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            self._users = _parse(json.loads(self.path.read_text(encoding="utf-8")))
            self._seen = seen

    def _save(self, users: Credentials) -> None:
        document = {
            "version": FORMAT_VERSION,
            "users": {
                user: {name: credential.to_text() for name, credential in sorted(entries.items())}
                for user, entries in sorted(users.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, [json.dumps(document, indent=1)], diskio.METADATA, 0o600)
        self._users = users
        stat = os.stat(self.path)
        self._seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _parse(document: Any) -> Credentials:
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ValueError(f"{CREDENTIALS_FILE}: not a version {FORMAT_VERSION} credential file")
    users: Credentials = {}
    for user, entries in document.get("users", {}).items():
        users[user] = {
            name: ScramCredential.from_text(text)
            for name, text in entries.items()
            if name in MECHANISMS
        }
    return users


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes writing the credential file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
