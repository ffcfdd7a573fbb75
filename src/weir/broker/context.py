"""What every request handler may use: configuration, metadata, partitions, topics, time."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.audit import AuditLog
from weir.broker.authz.acl import AclOperation, ResourceType
from weir.broker.authz.authorizer import Authorizer
from weir.broker.client_quotas import ClientQuotas
from weir.broker.cluster_node import ClusterNode, LiveBroker
from weir.broker.config import BrokerConfig
from weir.broker.disk_health import DiskHealth
from weir.broker.dynamic_config import DynamicBrokerConfig
from weir.broker.fetch_sessions import FetchSessionCache
from weir.broker.group.coordinator import GroupCoordinator
from weir.broker.log_dir_mover import LogDirMovers
from weir.broker.replica_manager import ReplicaManager
from weir.broker.request_log import RequestLog
from weir.broker.security.credentials import CredentialStore
from weir.broker.security.session import current_session
from weir.broker.topics import TopicManager
from weir.broker.txn.coordinator import TransactionCoordinator
from weir.broker.txn.verification import TransactionVerifier
from weir.clock import Clock
from weir.cluster.metadata import MetadataStore
from weir.protocol.codec import field_names, fields_in_any_version
from weir.storage import LogConfig


class ProducerIdAllocator:
    """Hands out producer ids from blocks reserved in the metadata store."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._block: range = range(0)
        self._next = 0

    def next_id(self) -> int:
        if self._next >= len(self._block):
            self._block = self._metadata.allocate_producer_ids()
            self._next = 0
        producer_id = self._block[self._next]
        self._next += 1
        return producer_id


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    metadata: MetadataStore
    replicas: ReplicaManager
    topics: TopicManager
    producer_ids: ProducerIdAllocator
    groups: GroupCoordinator
    clock: Clock
    request_log: RequestLog
    #: this broker's part in a ZooKeeper cluster; None on a single node
    cluster: ClusterNode | None = None
    #: the transaction coordinator; None where a broker is built without one
    transactions: TransactionCoordinator | None = None
    #: SCRAM credentials: a file on a single node, ZooKeeper in a cluster
    scram_credentials: CredentialStore | None = None
    #: KIP-890's check of transactional batches against their coordinator
    verification: TransactionVerifier | None = None
    #: the ACL authorizer (`authorizer.class.name`); None: every client may do everything
    authorizer: Authorizer | None = None
    #: the dynamic broker configs layered over `config` (which is their effective result)
    dynamic_config: DynamicBrokerConfig | None = None
    #: the client quotas (produce and fetch byte rates, request time) and their configs
    quotas: ClientQuotas | None = None
    #: the incremental fetch sessions of consumers and followers (KIP-227)
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)
    #: moves of replicas between this broker's log directories (AlterReplicaLogDirs)
    log_dir_movers: LogDirMovers | None = None
    #: who reads and writes what, per minute (`audit.enable`); None: not counted
    audit: AuditLog | None = None
    #: the log directories' devices and the partitions throttled on them
    #: (`disk.throttle.enable`); None: no throttling by disk health
    disk_health: DiskHealth | None = None

    def authorized(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the client of the request being served may do `operation` on the
        resource (always, without an authorizer)."""
        return self.authorizer is None or self.authorizer.allows(operation, resource_type, name)

    @property
    def advertised(self) -> tuple[str, int]:
        """This broker's address for the client of the request being served: the advertised
        address of the listener it connected to (the first listener's outside a request)."""
        session = current_session()
        return session.listener.advertised if session else self.config.advertised

    def live_brokers(self) -> list[LiveBroker]:
        """The brokers Metadata lists, by node id: the cluster's live ones (with their address
        on the listener the client connected to; those without that listener are left out),
        or this one."""
        if self.cluster is not None:
            brokers = sorted(self.cluster.live_brokers().values(), key=lambda b: b.node_id)
            return [b for b in map(self.for_client, brokers) if b is not None]
        host, port = self.advertised
        return [LiveBroker(self.config.node_id, host, port, self.config.rack)]

    def for_client(self, broker: LiveBroker) -> LiveBroker | None:
        """`broker` with its address on the listener of the request being served (outside a
        request: on the first listener); None if it has no such listener."""
        session = current_session()
        listener = session.listener.name if session else self.config.endpoints[0].name
        return broker.on_listener(listener)

    def controller_request_error(self, body: Any) -> ErrorCode:
        """NONE if a controller request (LeaderAndIsr, UpdateMetadata, StopReplica) may be
        applied here: its controller epoch is not older than one seen (and this is a cluster)."""
        if self.cluster is None:
            return ErrorCode.stale_controller_epoch
        return self.cluster.check_controller(
            body.controller_epoch, getattr(body, "broker_epoch", -1)
        )

    async def log_config(self, topic: str) -> LogConfig:
        """`topic`'s log config from its metadata (read from ZooKeeper off the loop when not
        known here yet); TopicError if this broker cannot apply it."""
        info = self.metadata.topic(topic)
        if info is None and self.cluster is not None:
            loop = asyncio.get_running_loop()
            info = await loop.run_in_executor(None, self.cluster.store.refresh_topic, topic)
        return self.topics.check_configs(info.configs if info is not None else {})

    @property
    def controller_id(self) -> int:
        if self.cluster is None:
            return self.config.node_id
        return self.cluster.cache.controller_id


def fenced_error(api_version: int, first_version_with_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED for clients that know it (KIP-588), INVALID_PRODUCER_EPOCH for older
    versions, which handle that one alike."""
    if api_version < first_version_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return ErrorCode.producer_fenced


def make(cls: type, **values: Any) -> Any:
    """Build a kio message of any version from the superset of fields we know: fields the
    version lacks are dropped, so one handler serves every version. A name that no version of
    the message has is a mistake, never dropped: TypeError."""
    names = field_names(cls)
    if not names.issuperset(values):
        unknown = values.keys() - fields_in_any_version(cls)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))} in any "
                            "version")  # fmt: skip
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(obj: Any, name: str) -> bool:
    kind: type = type(obj)
    return name in field_names(kind)
