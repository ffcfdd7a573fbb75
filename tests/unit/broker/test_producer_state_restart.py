"""Producer and transaction state across broker restarts, on fake time: a partition with many
transactions over many segments comes back from its snapshot (nothing replayed after a clean
shutdown, only the tail after a crash), read_committed fetches still name every aborted
transaction (from the `.txnindex` files), idempotent sequence checks go on where they were, and a
partition an older weir wrote (transactions, no index or snapshot) is rebuilt once."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from weir.broker.partition import Partition
from weir.broker.replica_manager import ReplicaManager
from weir.broker.results import FetchRequestPartition, release
from weir.broker.txn.markers import control_batch
from weir.clock import FakeClock, FakeScheduler
from weir.records import BatchSpec, Record, build_batch
from weir.storage import LogConfig, LogManager, LogManagerConfig

TOPIC = "payments"
CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=256)
TRANSACTIONS = 60
IDEMPOTENT = 99


@dataclass
class Broker:
    data_dir: Path
    clock: FakeClock = field(default_factory=FakeClock)

    def __post_init__(self) -> None:
        self.scheduler = FakeScheduler(self.clock)
        self.logs = LogManager(self.data_dir, CONFIG, self.clock, self.scheduler,
                               LogManagerConfig(), {TOPIC: CONFIG})  # fmt: skip
        self.replicas = ReplicaManager(self.logs, self.clock)
        self.replicas.create_partitions(TOPIC, 1, CONFIG)

    @property
    def partition(self) -> Partition:
        partition = self.replicas.get(TOPIC, 0)
        assert partition is not None
        return partition

    def produce(self, producer_id: int, sequence: int, *, transactional: bool = False) -> int:
        now = self.clock.milliseconds()
        values = [b"%d-%d" % (producer_id, sequence + i) for i in range(3)]
        records = [Record(offset=i, timestamp=now, key=None, value=v) for i, v in enumerate(values)]
        spec = BatchSpec(producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                         transactional=transactional)  # fmt: skip
        result = self.replicas.append(TOPIC, 0, build_batch(records, spec=spec))
        assert result.error is ErrorCode.none, result.message
        self.scheduler.run_due()  # the storage thread's share: snapshots written at rolls
        return result.base_offset

    def end_txn(self, producer_id: int, commit: bool) -> None:
        marker = control_batch(producer_id, 0, 0, commit, self.clock.milliseconds())
        assert self.replicas.append_marker(TOPIC, 0, marker, commit).error is ErrorCode.none
        self.scheduler.run_due()

    def aborted_seen(self) -> set[tuple[int, int]]:
        """Every (producer id, first offset) read_committed fetches from offset 0 name."""
        return asyncio.run(self._read_committed())

    async def _read_committed(self) -> set[tuple[int, int]]:
        seen: set[tuple[int, int]] = set()
        offset = 0
        while offset < self.partition.last_stable_offset:
            request = FetchRequestPartition(TOPIC, 0, offset, 1 << 20)
            results = await self.replicas.fetch([request], max_wait_ms=0, min_bytes=0,
                                                max_bytes=1 << 20, read_committed=True)  # fmt: skip
            (result,) = results
            assert result.data is not None and result.aborted is not None
            seen.update(result.aborted)
            offset = result.data.next_offset
            release(results)
        return seen

    def crash(self) -> None:
        """As after kill -9: files stay as they are, nothing is closed or checkpointed."""

    def close(self) -> None:
        self.logs.close()


def _write_transactions(broker: Broker, rng: random.Random) -> set[tuple[int, int]]:
    """TRANSACTIONS transactions of two producers, interleaved, about half aborted, with an
    idempotent producer writing in between; returns the aborted ones."""
    aborted = set()
    sequences = {1000: 0, 2000: 0, IDEMPOTENT: 0}
    for i in range(TRANSACTIONS):
        producer_id = 1000 if i % 2 else 2000
        first = broker.produce(producer_id, sequences[producer_id], transactional=True)
        sequences[producer_id] += 3
        broker.produce(IDEMPOTENT, sequences[IDEMPOTENT])
        sequences[IDEMPOTENT] += 3
        broker.produce(producer_id, sequences[producer_id], transactional=True)
        sequences[producer_id] += 3
        commit = rng.random() < 0.5
        broker.end_txn(producer_id, commit)
        if not commit:
            aborted.add((producer_id, first))
    return aborted


def _idempotence_goes_on(broker: Broker) -> None:
    last = 3 * (TRANSACTIONS - 1)
    retry = broker.replicas.append(TOPIC, 0, _idempotent_batch(broker, last))
    assert retry.error is ErrorCode.none  # the retry of the last batch is answered, not appended
    assert retry.end_offset <= broker.partition.log.log_end_offset
    gap = broker.replicas.append(TOPIC, 0, _idempotent_batch(broker, last + 30))
    assert gap.error is ErrorCode.out_of_order_sequence_number
    assert broker.replicas.append(TOPIC, 0, _idempotent_batch(broker, last + 3)).error is (
        ErrorCode.none
    )


def _idempotent_batch(broker: Broker, sequence: int) -> bytes:
    records = [Record(offset=i, timestamp=broker.clock.milliseconds(), key=None,
                      value=b"%d-%d" % (IDEMPOTENT, sequence + i)) for i in range(3)]  # fmt: skip
    spec = BatchSpec(producer_id=IDEMPOTENT, producer_epoch=0, base_sequence=sequence)
    return build_batch(records, spec=spec)


def test_a_clean_restart_loads_the_snapshot_and_replays_nothing(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    aborted = _write_transactions(broker, random.Random(1))
    open_from = broker.produce(1000, 3 * TRANSACTIONS, transactional=True)  # left open
    assert len(broker.partition.log.segments) > 10 and aborted
    assert broker.aborted_seen() == aborted
    broker.close()

    restarted = Broker(tmp_path)
    log = restarted.partition.log
    assert log.load_report.replayed_batches == 0
    assert restarted.partition.producers.first_unstable_offset() == open_from
    assert restarted.aborted_seen() == aborted
    _idempotence_goes_on(restarted)
    restarted.close()


def test_after_a_crash_only_the_tail_is_replayed_and_its_aborts_reindexed(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    aborted = _write_transactions(broker, random.Random(2))
    broker.partition.log.flush()
    broker.logs.checkpoint()  # the recovery point as the periodic checkpoint wrote it
    rng = random.Random(3)
    tail_aborted = set()
    for i in range(4):  # past the recovery point
        first = broker.produce(1000, 3 * TRANSACTIONS + 3 * i, transactional=True)
        commit = rng.random() < 0.5 and i != 3
        broker.end_txn(1000, commit)
        tail_aborted |= set() if commit else {(1000, first)}
    end = broker.partition.log.log_end_offset
    total = sum(1 for _ in broker.partition.log.batch_headers())
    broker.crash()

    restarted = Broker(tmp_path)
    log = restarted.partition.log
    assert log.log_end_offset == end
    assert 8 <= log.load_report.replayed_batches < total // 4
    assert restarted.aborted_seen() == aborted | tail_aborted
    _idempotence_goes_on(restarted)
    restarted.close()


def test_a_partition_an_older_weir_wrote_is_rebuilt_once(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    aborted = _write_transactions(broker, random.Random(4))
    directory = broker.partition.log.directory
    batches = sum(1 for _ in broker.partition.log.batch_headers())
    broker.close()
    for path in [*directory.glob("*.snapshot"), *directory.glob("*.txnindex")]:
        path.unlink()  # as an older weir left it: the has-transactions marker only

    upgraded = Broker(tmp_path)
    assert upgraded.partition.log.load_report.replayed_batches == batches
    assert list(directory.glob("*.txnindex")) and list(directory.glob("*.snapshot"))
    assert upgraded.aborted_seen() == aborted
    upgraded.crash()

    again = Broker(tmp_path)
    assert again.partition.log.load_report.replayed_batches == 0
    assert again.aborted_seen() == aborted
    again.close()


def test_damaged_files_are_rebuilt_from_the_log_not_trusted(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    aborted = _write_transactions(broker, random.Random(5))
    log = broker.partition.log
    indexed = [s for s in log.segments if not s.txn_index.is_empty]
    segment = indexed[len(indexed) // 2]
    damaged = segment.txn_index.path
    torn = log.directory / f"{segment.base_offset:020d}.snapshot"  # where a replay would start
    broker.close()
    with damaged.open("r+b") as file:  # a torn last entry
        file.truncate(damaged.stat().st_size - 7)
    torn.write_bytes(torn.read_bytes()[:-1])

    restarted = Broker(tmp_path)
    problems = " ".join(restarted.partition.log.load_report.problems)
    assert damaged.name in problems and "ignoring producer snapshot" in problems
    assert restarted.partition.log.load_report.replayed_batches > 0
    assert restarted.aborted_seen() == aborted
    _idempotence_goes_on(restarted)
    restarted.close()
