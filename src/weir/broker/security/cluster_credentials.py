"""SCRAM credentials of a cluster, kept in ZooKeeper under /config/users/<user> in Kafka's text
form (see weir.cluster.entity_configs): the same `CredentialStore` interface as a single node's
file, so AlterUserScramCredentials, DescribeUserScramCredentials, SASL/SCRAM and `weir user`
work alike on both. A change written through any broker reaches every broker through the
/config/changes notification that goes with it.

Thread-safety (docs/threads.md): `lookup` and `users` read the current snapshot and may run on the
event loop; `alter` writes to ZooKeeper and must run in an executor.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

from weir.broker.security.credentials import Credentials, Deletion, Upsertion
from weir.broker.security.scram import MECHANISMS, ScramCredential, ScramMechanism
from weir.cluster.entity_configs import UserConfigs, ZooKeeperUserConfigs


class ZooKeeperCredentialStore:
    def __init__(self, configs: ZooKeeperUserConfigs) -> None:
        self._configs = configs
        self._parsed_from: UserConfigs | None = None
        self._users: Credentials = {}

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.users().get(user, {}).get(mechanism.name)

    def users(self) -> Credentials:
        """user -> mechanism name -> credential, as ZooKeeper held them at the last change."""
        snapshot = self._configs.users()
        if snapshot is not self._parsed_from:
            self._users = {
                user: parsed
                for user, config in snapshot.items()
                if (parsed := _credentials(config))
            }
            self._parsed_from = snapshot
        return self._users

    def alter(self, upsertions: Iterable[Upsertion], deletions: Iterable[Deletion]) -> None:
        """Apply the changes, user by user (each user's in one ZooKeeper transaction)."""
        changes: dict[str, tuple[list[Upsertion], list[Deletion]]] = {}
        for deletion in deletions:
            changes.setdefault(deletion.user, ([], []))[1].append(deletion)
        for upsertion in upsertions:
            changes.setdefault(upsertion.user, ([], []))[0].append(upsertion)
        for user, (upserted, deleted) in changes.items():
            self._configs.alter(user, functools.partial(_changed, upserted, deleted))


def _changed(
    upserted: list[Upsertion], deleted: list[Deletion], config: dict[str, str]
) -> dict[str, str]:
    """A user's config with its deletions and then its upsertions applied."""
    for deletion in deleted:
        config.pop(deletion.mechanism.name, None)
    for upsertion in upserted:
        config[upsertion.mechanism.name] = upsertion.credential.to_text()
    return config


def _credentials(config: Mapping[str, str]) -> dict[str, ScramCredential]:
    out = {}
    for name, text in config.items():
        if name in MECHANISMS:
            try:
                out[name] = ScramCredential.from_text(text)
            except ValueError:
                continue  # a malformed entry authenticates nobody
    return out
