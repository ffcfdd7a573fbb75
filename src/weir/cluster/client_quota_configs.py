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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from weir.cluster import znodes
from weir.cluster.entity_configs import ConfigChange, ZooKeeperConfigFollower


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


class ZooKeeperClientQuotaConfigs(ZooKeeperConfigFollower[QuotaEntity]):
    """Every client quota entity's config, from /config/users and /config/clients."""

    _parents = tuple(znodes.entity_configs_path(t) for t in (znodes.USERS, znodes.CLIENTS))

    def alter(self, entity: QuotaEntity, change: ConfigChange) -> dict[str, str]:
        """Apply `change` to `entity`'s config in ZooKeeper and notify every broker."""
        return self._alter(entity, entity.path, change)

    def _path(self, entity: QuotaEntity) -> str:
        return f"/config/{entity.path}"

    def _entity_named(self, notification: bytes) -> QuotaEntity | None:
        return QuotaEntity.from_path(znodes.parse_change_path(notification))

    def _all(self) -> Iterable[QuotaEntity]:
        for user in self._children(znodes.entity_configs_path(znodes.USERS)):
            yield QuotaEntity(user=user)
            clients = f"/config/{znodes.quota_entity_path(user, None)}/{znodes.CLIENTS}"
            for client_id in self._children(clients):
                yield QuotaEntity(user, client_id)
        for client_id in self._children(znodes.entity_configs_path(znodes.CLIENTS)):
            yield QuotaEntity(client_id=client_id)
