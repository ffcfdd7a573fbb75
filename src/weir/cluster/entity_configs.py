"""Users' and brokers' configs in ZooKeeper, in Kafka's layout:

    /config/users/<user>                      {"version": 1, "config": {"SCRAM-SHA-512": "..."}}
    /config/brokers/<id> | <default>          {"version": 1, "config": {"log.retention.ms": "..."}}
    /config/changes/config_change_NNNNNNNNNN  {"version": 2, "entity_path": "users/<user>"}

A cluster keeps its SCRAM credentials in the users' configs and its dynamic broker configs in
the brokers' (one per broker id, and `<default>` for the whole cluster). Every broker reads all
entities of a type when it starts, then reloads an entity whenever a change notification names
it, so a change made through one broker (or by weir's or Kafka's own tools) is seen by every
broker. A write changes the entity's znode and adds the notification in one ZooKeeper
transaction, conditional on the znode's version (another writer in between: read again and
retry). An entity whose entries are all deleted keeps an empty config, as Kafka leaves it.

The values are kept as text (name -> value); what they mean is the broker's business.
Thread-safety (docs/threads.md): `configs()` may be called from any thread (the snapshot is
replaced whole, never
changed in place); `alter` blocks on ZooKeeper; `on_change` callbacks run on kazoo's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from weir.cluster import znodes
from weir.cluster.znodes import ZnodeFormatError

log = logging.getLogger(__name__)

EntityConfigs = Mapping[str, Mapping[str, str]]
UserConfigs = EntityConfigs
#: how a write changes one entity's config: the current one -> the new one
ConfigChange = Callable[[dict[str, str]], dict[str, str]]
#: what names an entity: its name (users, brokers) or a client quota's user and client id
E = TypeVar("E")


class ZooKeeperConfigFollower(Generic[E]):
    """A snapshot of entity -> config read from ZooKeeper, kept current by following the change
    notifications: every entity is read when following starts, then an entity is read again
    whenever a notification names it. Subclasses say where their entities live: the znode of
    an entity (`_path`), the entity a notification names (`_entity_named`, None if it is not
    one of theirs), and every entity there is (`_all`)."""

    #: the znodes that must exist before following starts
    _parents: tuple[str, ...] = ()

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._configs: dict[E, dict[str, str]] = {}
        self._last_change = -1
        self._loaded = False
        self._listeners: list[Callable[[E], None]] = []

    def _path(self, entity: E) -> str:
        raise NotImplementedError

    def _entity_named(self, notification: bytes) -> E | None:
        raise NotImplementedError

    def _all(self) -> Iterable[E]:
        raise NotImplementedError

    def start(self) -> None:
        """Load every entity and follow the change notifications (the client is connected)."""
        for path in self._parents:
            self._client.ensure_path(path)
        self._client.ensure_path(znodes.CONFIG_CHANGES)
        ChildrenWatch(self._client, znodes.CONFIG_CHANGES, self._on_changes)

    def configs(self) -> Mapping[E, Mapping[str, str]]:
        """entity -> config, entities with an empty config left out."""
        return self._configs

    def on_change(self, listener: Callable[[E], None]) -> None:
        """Have `listener(entity)` called (on kazoo's thread) after an entity's config was
        reloaded because a change notification named it."""
        self._listeners.append(listener)

    def _alter(self, entity: E, change_path: str, change: ConfigChange) -> dict[str, str]:
        updated = alter_entity_config(self._client, self._path(entity), change_path, change)
        self._store(entity, updated)
        return updated

    def _on_changes(self, children: list[str]) -> None:
        numbers = sorted(sequence_number(child) for child in children)
        with self._lock:
            first_call, last = not self._loaded, self._last_change
            self._last_change = max([last, *numbers])
            self._loaded = True
        if first_call:
            for entity in self._all():
                self._reload(entity)
            return
        for number in numbers:
            if number > last:
                self._apply_change(f"{znodes.CONFIG_CHANGE_PREFIX}{number:010d}")

    def _apply_change(self, child: str) -> None:
        try:
            data, _ = self._client.get(f"{znodes.CONFIG_CHANGES}/{child}")
            entity = self._entity_named(data)
        except NoNodeError:
            return  # purged already
        except ZnodeFormatError as exc:
            log.warning("ignoring config change %s: %s", child, exc)
            return
        if entity is not None:
            self._reload(entity)
            for listener in self._listeners:
                listener(entity)

    def _children(self, path: str) -> list[str]:
        try:
            return [znodes.desanitize(name) for name in self._client.get_children(path)]
        except NoNodeError:
            return []

    def _reload(self, entity: E) -> None:
        path = self._path(entity)
        try:
            data, _ = self._client.get(path)
            config = znodes.parse_entity_config(path, data)
        except NoNodeError:
            config = {}
        except ZnodeFormatError as exc:
            log.warning("ignoring the config of %s: %s", path, exc)
            return
        self._store(entity, config)

    def _store(self, entity: E, config: dict[str, str]) -> None:
        with self._lock:
            configs = dict(self._configs)
            if config:
                configs[entity] = config
            else:
                configs.pop(entity, None)
            self._configs = configs


class ZooKeeperEntityConfigs(ZooKeeperConfigFollower[str]):
    """The configs of every entity of one type (`users`, `brokers`) under /config/<type>."""

    def __init__(self, client: KazooClient, entity_type: str) -> None:
        super().__init__(client)
        self.entity_type = entity_type
        self._parents = (znodes.entity_configs_path(entity_type),)

    def alter(self, entity: str, change: ConfigChange) -> dict[str, str]:
        """Apply `change` to `entity`'s config in ZooKeeper and notify every broker; the new
        config."""
        return self._alter(entity, self._path(entity).removeprefix("/config/"), change)

    def _path(self, entity: str) -> str:
        return znodes.entity_config_path(self.entity_type, entity)

    def _entity_named(self, notification: bytes) -> str | None:
        kind, entity = znodes.parse_change_entity(notification)
        return entity if kind == self.entity_type and entity else None

    def _all(self) -> Iterable[str]:
        return self._children(znodes.entity_configs_path(self.entity_type))


class ZooKeeperUserConfigs(ZooKeeperEntityConfigs):
    """Users' configs: where a cluster keeps its SCRAM credentials."""

    def __init__(self, client: KazooClient) -> None:
        super().__init__(client, znodes.USERS)

    def users(self) -> UserConfigs:
        """user -> config, users with an empty config left out."""
        return self.configs()


def alter_entity_config(
    client: KazooClient, path: str, entity_path: str, change: ConfigChange
) -> dict[str, str]:
    """Write `change(current config)` to the config znode at `path` and a change notification
    naming `entity_path`, in one transaction conditional on the znode's version (another
    writer in between: read again and retry); the new config. A missing znode's parents are
    made first, without data, as Kafka makes them."""
    while True:
        try:
            data, stat = client.get(path)
            current, version = znodes.parse_entity_config(path, data), stat.version
        except NoNodeError:
            current, version = {}, -1
            client.ensure_path(path.rsplit("/", 1)[0])
        updated = change(dict(current))
        transaction = client.transaction()
        if version < 0:
            transaction.create(path, znodes.encode_entity_config(updated))
        else:
            transaction.set_data(path, znodes.encode_entity_config(updated), version=version)
        transaction.create(
            f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_change_path(entity_path),
            sequence=True,
        )
        results = transaction.commit()
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if isinstance(failure, (BadVersionError, NodeExistsError, NoNodeError)):
            continue  # another writer came first: read again
        if failure is not None:
            raise failure
        return updated


def sequence_number(child: str) -> int:
    """The number of a change notification's znode (config_change_0000000042 -> 42)."""
    digits = child.removeprefix(znodes.CONFIG_CHANGE_PREFIX)
    return int(digits) if digits.isdigit() else -1
