"""Cluster metadata: topics (id, partition count, config overrides, replicas), the cluster id,
producer id allocation and (on a single node) the dynamic broker configs and client quotas. One
interface, `MetadataStore`, with two engines: this module holds the embedded single-node engine;
`weir.cluster.zookeeper` the cluster's (Apache ZooKeeper).

`EmbeddedMetadataStore` keeps everything in one JSON document, `<data dir>/weir-metadata.json`,
rewritten atomically on every change (changes are rare: topic admin, producer id blocks). A change
takes effect only once it is written: if the write fails (OSError, e.g. a full disk), the store
and its file are as they were.

Thread-safety (docs/threads.md): `EmbeddedMetadataStore` methods hold its lock.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from weir import diskio
from weir.cluster.client_quota_configs import QuotaConfigs, QuotaEntity
from weir.durable import write_atomically

METADATA_FILE = "weir-metadata.json"
MAX_TOPIC_NAME = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
PRODUCER_ID_BLOCK = 1000


class MetadataError(Exception):
    error_code: int = -1


class TopicExistsError(MetadataError):
    error_code = 36


class UnknownTopicError(MetadataError):
    error_code = 3


class InvalidTopicError(MetadataError):
    error_code = 17


class InvalidPartitionsError(MetadataError):
    error_code = 37


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    #: each partition's replica list (cluster mode); empty on a single node, where this broker
    #: is every partition's only replica
    replicas: tuple[tuple[int, ...], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": str(self.topic_id), "partitions": self.partitions, "configs": self.configs}

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicInfo:
        return cls(
            name=name,
            topic_id=uuid.UUID(data["id"]),
            partitions=int(data["partitions"]),
            configs={str(k): str(v) for k, v in data.get("configs", {}).items()},
        )


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_NAME.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )


class MetadataStore(Protocol):
    @property
    def cluster_id(self) -> str: ...

    def topics(self) -> dict[str, TopicInfo]: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replicas: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo: ...

    def delete_topic(self, name: str) -> TopicInfo: ...

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo: ...

    def add_partitions(
        self, name: str, total: int, replicas: Sequence[Sequence[int]] | None = None
    ) -> TopicInfo: ...

    def allocate_producer_ids(self) -> range: ...


class EmbeddedMetadataStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / METADATA_FILE
        self._lock = threading.Lock()
        data_dir.mkdir(parents=True, exist_ok=True)
        exists = self.path.exists()
        if exists:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        else:
            document = {"cluster_id": new_cluster_id(), "topics": {}, "next_producer_id": 0}
        self._cluster_id: str = document["cluster_id"]
        self._topics = {n: TopicInfo.from_json(n, t) for n, t in document["topics"].items()}
        self._next_producer_id: int = int(document["next_producer_id"])
        self._broker_configs: dict[str, dict[str, str]] = {
            str(entity): {str(k): str(v) for k, v in config.items()}
            for entity, config in document.get("broker_configs", {}).items()
        }
        #: client quotas' configs by entity path ("users/alice/clients/app1"), as ZooKeeper's
        self._client_quotas: dict[str, dict[str, str]] = {
            str(path): {str(k): str(v) for k, v in config.items()}
            for path, config in document.get("client_quotas", {}).items()
        }
        #: the dynamic broker configs, as a cluster keeps them in ZooKeeper
        self.broker_configs = EmbeddedBrokerConfigs(self)
        #: the client quotas' configs, as a cluster keeps them in ZooKeeper
        self.client_quota_configs = EmbeddedClientQuotaConfigs(self)
        if not exists:
            self._save(self._topics, self._next_producer_id)

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def topics(self) -> dict[str, TopicInfo]:
        with self._lock:
            return dict(self._topics)

    def topic(self, name: str) -> TopicInfo | None:
        with self._lock:
            return self._topics.get(name)

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replicas: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        validate_topic_name(name)
        if partitions < 1:
            raise InvalidPartitionsError(f"partition count {partitions} must be at least 1")
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            info = TopicInfo(
                name=name, topic_id=uuid.uuid4(), partitions=partitions, configs=dict(configs)
            )
            self._commit({**self._topics, name: info})
            return info

    def delete_topic(self, name: str) -> TopicInfo:
        with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"topic {name!r} does not exist")
            self._commit({n: t for n, t in self._topics.items() if n != name})
            return info

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        return self._update(name, lambda info: replace(info, configs=dict(configs)))

    def add_partitions(
        self, name: str, total: int, replicas: Sequence[Sequence[int]] | None = None
    ) -> TopicInfo:
        def grow(info: TopicInfo) -> TopicInfo:
            if total <= info.partitions:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {info.partitions} partitions; {total} is not more"
                )
            return replace(info, partitions=total)

        return self._update(name, grow)

    def allocate_producer_ids(self) -> range:
        with self._lock:
            first = self._next_producer_id
            self._commit(self._topics, first + PRODUCER_ID_BLOCK)
            return range(first, first + PRODUCER_ID_BLOCK)

    def dynamic_broker_configs(self) -> Mapping[str, Mapping[str, str]]:
        """entity -> its dynamic broker config (replaced whole on a change, never in place)."""
        return self._broker_configs

    def alter_broker_config(
        self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Apply `change` to one entity's dynamic broker config (a node id, or `<default>`)."""
        with self._lock:
            updated = change(dict(self._broker_configs.get(entity, {})))
            configs = {**self._broker_configs, entity: updated}
            self._save(self._topics, self._next_producer_id, configs)
            self._broker_configs = {e: c for e, c in configs.items() if c}
            return updated

    def client_quota_configs_by_path(self) -> Mapping[str, Mapping[str, str]]:
        """entity path -> its client quota config (replaced whole on a change)."""
        return self._client_quotas

    def alter_client_quota_config(
        self, entity_path: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Apply `change` to one client quota entity's config and write the store."""
        with self._lock:
            updated = change(dict(self._client_quotas.get(entity_path, {})))
            quotas = {p: c for p, c in {**self._client_quotas, entity_path: updated}.items() if c}
            self._save(self._topics, self._next_producer_id, client_quotas=quotas)
            self._client_quotas = quotas
            return updated

    def _update(self, name: str, change: Any) -> TopicInfo:
        with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"topic {name!r} does not exist")
            updated: TopicInfo = change(info)
            self._commit({**self._topics, name: updated})
            return updated

    def _commit(self, topics: dict[str, TopicInfo], next_producer_id: int | None = None) -> None:
        """Write the new state, then adopt it."""
        producer_id = self._next_producer_id if next_producer_id is None else next_producer_id
        self._save(topics, producer_id)
        self._topics = topics
        self._next_producer_id = producer_id

    def _save(
        self,
        topics: dict[str, TopicInfo],
        next_producer_id: int,
        broker_configs: Mapping[str, Mapping[str, str]] | None = None,
        client_quotas: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        configs = self._broker_configs if broker_configs is None else broker_configs
        quotas = self._client_quotas if client_quotas is None else client_quotas
        document = {
            "cluster_id": self._cluster_id,
            "next_producer_id": next_producer_id,
            "topics": {n: t.to_json() for n, t in sorted(topics.items())},
            "broker_configs": {e: dict(c) for e, c in sorted(configs.items()) if c},
            "client_quotas": {p: dict(c) for p, c in sorted(quotas.items()) if c},
        }
        write_atomically(self.path, [json.dumps(document, indent=1)], diskio.METADATA)


class EmbeddedBrokerConfigs:
    """A single node's dynamic broker configs (its own and `<default>`), kept in the embedded
    store's document; the same interface as a cluster's (weir.cluster.entity_configs)."""

    def __init__(self, store: EmbeddedMetadataStore) -> None:
        self._store = store

    def configs(self) -> Mapping[str, Mapping[str, str]]:
        """entity -> config, entities with an empty config left out."""
        return self._store.dynamic_broker_configs()

    def alter(
        self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Apply `change` to `entity`'s config and write the store (blocks on the disk)."""
        return self._store.alter_broker_config(entity, change)


class EmbeddedClientQuotaConfigs:
    """A single node's client quota configs, kept in the embedded store's document under their
    entity paths; the same interface as a cluster's (weir.cluster.client_quota_configs)."""

    def __init__(self, store: EmbeddedMetadataStore) -> None:
        self._store = store

    def configs(self) -> QuotaConfigs:
        """entity -> config, entities with an empty config left out."""
        by_path = self._store.client_quota_configs_by_path()
        entities = ((QuotaEntity.from_path(path), config) for path, config in by_path.items())
        return {entity: config for entity, config in entities if entity is not None}

    def alter(
        self, entity: QuotaEntity, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Apply `change` to `entity`'s config and write the store (blocks on the disk)."""
        return self._store.alter_client_quota_config(entity.path, change)


def new_cluster_id() -> str:
    """A Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
