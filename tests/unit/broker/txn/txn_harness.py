"""Helpers shared by the transaction coordinator unit tests: a transaction coordinator on a
broker's storage stack (../storage_world.py), and a marker writer that records what it is asked
to write and answers what the test tells it to."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from storage_world import StorageWorld

from weir.broker.txn.coordinator import InitResult, TransactionCoordinator, TxnConfig
from weir.broker.txn.store import TransactionStore

STATE_PARTITIONS = 4
TIMEOUT_MS = 60_000
ABORT_CHECK_MS = 1_000

TEST_TXN_CONFIG = TxnConfig(
    max_timeout_ms=900_000,
    transactional_id_expiration_ms=3_600_000,
    abort_timed_out_interval_ms=ABORT_CHECK_MS,
    remove_expired_interval_ms=60_000,
    marker_retry_backoff_ms=1,
)


@dataclass(frozen=True, slots=True)
class MarkerCall:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]


@dataclass
class FakeMarkers:
    """Records every call; answers each partition NONE unless `answers` (one dict per call, in
    order) says otherwise; waits on `gate` first when one is set."""

    calls: list[MarkerCall] = field(default_factory=list)
    answers: list[dict[tuple[str, int], ErrorCode]] = field(default_factory=list)
    gate: asyncio.Event | None = None

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append(MarkerCall(producer_id, producer_epoch, coordinator_epoch, commit,
                                     tuple(partitions)))  # fmt: skip
        if self.gate is not None:
            await self.gate.wait()
        answer = self.answers.pop(0) if self.answers else {}
        return {tp: answer.get(tp, ErrorCode.none) for tp in partitions}


async def no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@dataclass
class TxnWorld(StorageWorld):
    """A transaction coordinator on a broker's storage (../storage_world.py), writing its
    markers through `markers`."""

    config: TxnConfig = TEST_TXN_CONFIG
    markers: FakeMarkers = field(default_factory=FakeMarkers)

    def __post_init__(self) -> None:
        self.next_id = 1000
        super().__post_init__()

    def open_coordinator(self) -> None:
        self.store = TransactionStore(self.replicas, self.topics, STATE_PARTITIONS, self.clock)
        self.coordinator = TransactionCoordinator(
            self.config, self.clock, self.store, self.markers, self._next_producer_id,
            sleep=no_wait,
        )  # fmt: skip

    def _next_producer_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def reopen(self) -> TransactionCoordinator:
        self.close()
        self.open()
        return self.coordinator

    async def advance(self, ms: int) -> None:
        """Move fake time, apply the coordinator's deadlines as the broker's ticker does, and
        let what they started finish."""
        self.clock.advance(ms)
        self.coordinator.tick()
        await self.coordinator.settle()

    # ---- calls into the coordinator ----------------------------------------------------------

    async def init(
        self, txn_id: str = "t", timeout_ms: int = TIMEOUT_MS, producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> InitResult:  # fmt: skip
        return await self.coordinator.init_producer_id(
            txn_id, timeout_ms, producer_id, producer_epoch
        )

    async def add(
        self, producer: InitResult, *partitions: tuple[str, int], txn_id: str = "t"
    ) -> ErrorCode:
        return await self.coordinator.add_partitions(
            txn_id, producer.producer_id, producer.producer_epoch, list(partitions)
        )

    async def end(self, producer: InitResult, commit: bool, txn_id: str = "t") -> ErrorCode:
        return await self.coordinator.end_transaction(
            txn_id, producer.producer_id, producer.producer_epoch, commit
        )

    def state(self, txn_id: str = "t") -> str:
        return self.coordinator.transactions[txn_id].state.value
