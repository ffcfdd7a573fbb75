"""Client quotas' configs in ZooKeeper, in Kafka's layout (see `znodes`):

    /config/users/<user> | <default>                       a user's quotas (next to its SCRAM
                                                           credentials)
    /config/users/<user> | <default>/clients/<client-id> | <default>
    /config/clients/<client-id> | <default>

Every broker reads them all when it starts, then reloads an entity whenever a change notification
(/config/changes) names its path, so an AlterClientQuotas served by one broker is in effect on
every broker. Writes go through `alter_entity_config` (the znode and its notification in one
transaction). The values are text (name -> value), as Kafka stores them; which names are quotas
is the broker's business, so a user's SCRAM credentials are read here too and left alone.

Thread-safety (docs/threads.md): `configs()` may be called from any thread (the snapshot is
replaced whole, never changed in place); `alter` blocks on ZooKeeper; `on_change` callbacks run
on kazoo's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from weir.cluster import znodes
from weir.cluster.entity_configs import ConfigChange, alter_entity_config, sequence_number
from weir.cluster.znodes import ZnodeFormatError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """Whom a client quota config is for: a user, a client id, or a user's client id. A part
    is None where the entity has none, `znodes.DEFAULT_ENTITY` for the type's default."""

    user: str | None = None
    client_id: str | None = None

    @property
    def path(self) -> str:
        """Its entity path: `users/<user>/clients/<client-id>`, `users/<user>`, `clients/<id>`."""
        return znodes.quota_entity_path(self.user, self.client_id)

    @property
    def sort_key(self) -> tuple[str, str]:
        """Users' entities first, by name, then client ids'."""
        return (f"1{self.user}" if self.user is not None else "2",
                f"1{self.client_id}" if self.client_id is not None else "0")  # fmt: skip

    @classmethod
    def from_path(cls, entity_path: str) -> QuotaEntity | None:
        parsed = znodes.parse_quota_entity_path(entity_path)
        return None if parsed is None else cls(*parsed)


QuotaConfigs = Mapping[QuotaEntity, Mapping[str, str]]


class ZooKeeperClientQuotaConfigs:
    """Every client quota entity's config, from /config/users and /config/clients."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._configs: dict[QuotaEntity, dict[str, str]] = {}
        self._last_change = -1
        self._loaded = False
        self._listeners: list[Callable[[QuotaEntity], None]] = []

    def start(self) -> None:
        """Load every entity and follow the change notifications (the client is connected)."""
        for entity_type in (znodes.USERS, znodes.CLIENTS):
            self._client.ensure_path(znodes.entity_configs_path(entity_type))
        self._client.ensure_path(znodes.CONFIG_CHANGES)
        ChildrenWatch(self._client, znodes.CONFIG_CHANGES, self._on_changes)

    def configs(self) -> QuotaConfigs:
        """entity -> config, entities with an empty config left out."""
        return self._configs

    def on_change(self, listener: Callable[[QuotaEntity], None]) -> None:
        """Have `listener(entity)` called (on kazoo's thread) after an entity's config was
        reloaded because a change notification named it."""
        self._listeners.append(listener)

    def alter(self, entity: QuotaEntity, change: ConfigChange) -> dict[str, str]:
        """Apply `change` to `entity`'s config in ZooKeeper and notify every broker."""
        updated = alter_entity_config(self._client, f"/config/{entity.path}", entity.path, change)
        self._store(entity, updated)
        return updated

    def _on_changes(self, children: list[str]) -> None:
        numbers = sorted(sequence_number(child) for child in children)
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
            entity = QuotaEntity.from_path(znodes.parse_change_path(data))
        except NoNodeError:
            return  # purged already
        except ZnodeFormatError as exc:
            log.warning("ignoring config change %s: %s", child, exc)
            return
        if entity is not None:
            self._reload(entity)
            for listener in self._listeners:
                listener(entity)

    def _reload_all(self) -> None:
        for user in self._children(znodes.entity_configs_path(znodes.USERS)):
            self._reload(QuotaEntity(user=user))
            clients = f"/config/{znodes.quota_entity_path(user, None)}/{znodes.CLIENTS}"
            for client_id in self._children(clients):
                self._reload(QuotaEntity(user, client_id))
        for client_id in self._children(znodes.entity_configs_path(znodes.CLIENTS)):
            self._reload(QuotaEntity(client_id=client_id))

    def _children(self, path: str) -> list[str]:
        try:
            return [znodes.desanitize(name) for name in self._client.get_children(path)]
        except NoNodeError:
            return []

    def _reload(self, entity: QuotaEntity) -> None:
        path = f"/config/{entity.path}"
        try:
            data, _ = self._client.get(path)
            config = znodes.parse_entity_config(path, data)
        except NoNodeError:
            config = {}
        except ZnodeFormatError as exc:
            log.warning("ignoring the config of %s: %s", path, exc)
            return
        self._store(entity, config)

    def _store(self, entity: QuotaEntity, config: dict[str, str]) -> None:
        with self._lock:
            configs = dict(self._configs)
            if config:
                configs[entity] = config
            else:
                configs.pop(entity, None)
            self._configs = configs
