"""Users' configs in ZooKeeper, where a cluster keeps its SCRAM credentials, in Kafka's layout:

    /config/users/<user>                      {"version": 1, "config": {"SCRAM-SHA-512": "..."}}
    /config/changes/config_change_NNNNNNNNNN  {"version": 2, "entity_path": "users/<user>"}

Every broker reads all users when it starts, then reloads a user whenever a change notification
names it, so a user created through one broker (or by `weir user create --zookeeper`, or by
Kafka's own tools) authenticates on every broker. A write changes the user's znode and adds
the notification in one ZooKeeper transaction, conditional on the znode's version (another
writer in between: read again and retry). A user whose credentials are all deleted keeps an
empty config, as Kafka leaves it.

The values are kept as text (mechanism name -> Kafka's credential text); what they mean is the
broker's business. Thread-safety (docs/threads.md): `users()` may be called from any thread (the
snapshot is replaced whole, never changed in place); `alter` blocks on ZooKeeper.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from weir.cluster import znodes
from weir.cluster.znodes import ZnodeFormatError

log = logging.getLogger(__name__)

UserConfigs = Mapping[str, Mapping[str, str]]
#: how a write changes one user's config: the current one -> the new one
ConfigChange = Callable[[dict[str, str]], dict[str, str]]


class ZooKeeperUserConfigs:
    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, str]] = {}
        self._last_change = -1
        self._loaded = False

    def start(self) -> None:
        """Load every user and follow the change notifications (the client is connected)."""
        self._client.ensure_path(znodes.CONFIG_USERS)
        self._client.ensure_path(znodes.CONFIG_CHANGES)
        ChildrenWatch(self._client, znodes.CONFIG_CHANGES, self._on_changes)

    def users(self) -> UserConfigs:
        """user -> config, users with an empty config left out."""
        return self._users

    def alter(self, user: str, change: ConfigChange) -> dict[str, str]:
        """Apply `change` to `user`'s config in ZooKeeper and notify every broker; the new
        config."""
        path = znodes.user_config_path(user)
        while True:
            try:
                data, stat = self._client.get(path)
                current, version = znodes.parse_user_config(user, data), stat.version
            except NoNodeError:
                current, version = {}, -1
            updated = change(dict(current))
            transaction = self._client.transaction()
            if version < 0:
                transaction.create(path, znodes.encode_user_config(updated))
            else:
                transaction.set_data(path, znodes.encode_user_config(updated), version=version)
            transaction.create(
                f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
                znodes.encode_user_config_change(user),
                sequence=True,
            )
            results = transaction.commit()
            failure = next((r for r in results if isinstance(r, Exception)), None)
            if isinstance(failure, (BadVersionError, NodeExistsError, NoNodeError)):
                continue  # another writer came first: read again
            if failure is not None:
                raise failure
            self._store(user, updated)
            return updated

    def _on_changes(self, children: list[str]) -> None:
        numbers = sorted(_sequence(child) for child in children)
        with self._lock:
            first_call, last = not self._loaded, self._last_change
            self._last_change = max([last, *numbers])
            self._loaded = True
        if first_call:
            self._reload_all()
            return
        for number in numbers:
            if number > last:
                self._apply_change(f"{znodes.CONFIG_CHANGE_PREFIX}{number:010d}")

    def _apply_change(self, child: str) -> None:
        try:
            data, _ = self._client.get(f"{znodes.CONFIG_CHANGES}/{child}")
            kind, user = znodes.parse_change_entity(data)
        except NoNodeError:
            return  # purged already
        except ZnodeFormatError as exc:
            log.warning("ignoring config change %s: %s", child, exc)
            return
        if kind == "users" and user:
            self._reload(user)

    def _reload_all(self) -> None:
        try:
            names = self._client.get_children(znodes.CONFIG_USERS)
        except NoNodeError:
            names = []
        for name in names:
            self._reload(znodes.desanitize(name))

    def _reload(self, user: str) -> None:
        try:
            data, _ = self._client.get(znodes.user_config_path(user))
            config = znodes.parse_user_config(user, data)
        except NoNodeError:
            config = {}
        except ZnodeFormatError as exc:
            log.warning("ignoring the config of user %s: %s", user, exc)
            return
        self._store(user, config)

    def _store(self, user: str, config: dict[str, str]) -> None:
        with self._lock:
            users = dict(self._users)
            if config:
                users[user] = config
            else:
                users.pop(user, None)
            self._users = users


def _sequence(child: str) -> int:
    digits = child.removeprefix(znodes.CONFIG_CHANGE_PREFIX)
    return int(digits) if digits.isdigit() else -1
