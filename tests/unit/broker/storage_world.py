"""The part the coordinator unit tests' worlds share: the storage stack a broker builds in
`Broker._open_storage`, on a real directory and fake time, with the topics "orders" (3
partitions) and "payments" (2). group_harness.GroupWorld and txn/txn_harness.TxnWorld put their
coordinator on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from weir.broker.config import BrokerConfig
from weir.broker.replica_manager import ReplicaManager
from weir.broker.topics import TopicManager
from weir.clock import FakeClock, FakeScheduler
from weir.cluster.metadata import EmbeddedMetadataStore
from weir.storage import LogConfig, LogManager, LogManagerConfig

TOPICS = {"orders": 3, "payments": 2}


@dataclass
class StorageWorld:
    """Opens the storage on `data_dir` at construction; `close` and `open` stop and restart it
    on the same directory, as a broker restart does. A subclass builds its coordinator in
    `open_coordinator`, which `open` calls once the storage is up."""

    data_dir: Path
    clock: FakeClock
    closed: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        self.open()
        for name, partitions in TOPICS.items():
            self.topics.create_now(name, partitions, {})

    def open(self) -> None:
        broker_config = BrokerConfig(data_dir=self.data_dir)
        self.metadata = EmbeddedMetadataStore(self.data_dir)
        self.scheduler = FakeScheduler(self.clock)
        topic_configs = {
            name: LogConfig.from_properties(info.configs, broker_config.log_defaults)
            for name, info in self.metadata.topics().items()
        }
        self.logs = LogManager(
            self.data_dir,
            broker_config.log_defaults,
            self.clock,
            self.scheduler,
            LogManagerConfig(flush_check_interval_ms=60_000),
            topic_configs,
        )
        self.replicas = ReplicaManager(self.logs, self.clock)
        self.topics = TopicManager(broker_config, self.metadata, self.replicas)
        self.open_coordinator()
        self.closed = False

    def open_coordinator(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if not self.closed:
            self.logs.close()
            self.scheduler.shutdown()
            self.closed = True
