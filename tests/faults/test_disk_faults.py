"""Disk faults injected into a real broker process at chosen write calls (`WEIR_DISK_FAULTS`, see
`weir.diskio`), under acks=all produce load from an idempotent confluent-kafka producer.

Small segments and a small index interval make segment rolls and index writes frequent, and
checkpoints are due every 100 ms, so every kind of file is written while records arrive. For each
kind of file (segment, index, checkpoint) and errno (ENOSPC, EIO) one call fails; then:

* no acknowledged record is lost, duplicated or served at another offset (read back with CRC
  checks, then again after a clean restart and after kill -9);
* ENOSPC does not take the log directory offline: later produces succeed in the same process;
* EIO on a segment or index write does (and so does a torn segment write whose cut-back fails):
  produce and fetch answer KAFKA_STORAGE_ERROR, Metadata shows the partition leaderless with this
  broker as an offline replica, the log says "is offline"; a restart brings back every
  acknowledged record;
* no `.tmp` file and no empty checkpoint is left, and the checkpoints that are there parse.

Metadata: CreateTopics while every metadata write fails answers KAFKA_STORAGE_ERROR and creates
nothing; the broker keeps serving, and the metadata file is the previous one, intact.

JBOD (`log.dirs`): EIO in one directory takes only that directory's partitions offline.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from brokerkit import (
    LEADER_NOT_AVAILABLE,
    AckedProducer,
    BrokerProcess,
    RawClient,
    assert_offline,
    check_all,
    create_topic,
    create_topic_error,
    leftovers,
    topics,
    weir,
)
from confluent_kafka import KafkaError

from weir.storage.checkpoint import OffsetCheckpointFile
from weir.storage.files import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT

TOPIC = "faults"
FAULTS = "WEIR_DISK_FAULTS"
CONFIG: dict[str, object] = {
    "log.segment.bytes": 64 * 1024,
    "log.index.interval.bytes": 1024,
    "log.flush.offset.checkpoint.interval.ms": 100,
    "log.dir.min.free.bytes": 1024 * 1024,
}
ROUNDS = 3
PER_ROUND = 500  # 1 KB records, ~10 to a batch: ~150 segment appends and ~25 rolls in all

# (id, rules, whether the directory must go offline: None where issue 17 does not say). `{dir}`
# is the data directory: a rule with a path fails only writes to files under it. The recovery
# point checkpoint fails for good from its third write on (after those at start-up); the leader
# epoch checkpoint fails once, when the partition's first epoch is recorded.
CASES = [
    ("segment-ENOSPC", "segment:write:60:ENOSPC", False),
    ("segment-EIO", "segment:write:60:EIO", True),
    ("segment-ENOSPC-cut-back-EIO", "segment:write:60:ENOSPC,segment:truncate:1+:EIO", True),
    ("index-ENOSPC", "index:write:60:ENOSPC", False),
    ("index-EIO", "index:write:60:EIO", True),
    ("checkpoint-ENOSPC", "checkpoint:write:3+:ENOSPC:{dir}/" + RECOVERY_POINT_CHECKPOINT, False),
    ("checkpoint-EIO", "checkpoint:write:3+:EIO:{dir}/" + RECOVERY_POINT_CHECKPOINT, None),
    ("leader-epoch-ENOSPC", "checkpoint:write:1:ENOSPC:{dir}/faults-0/leader-epoch", False),
]


def produce_under_load(broker: BrokerProcess) -> AckedProducer:
    """Rounds of records with pauses between them (checkpoints fall due); stops early once
    deliveries fail (an offline directory fails them all)."""
    producer = AckedProducer(
        broker.bootstrap, TOPIC, message_timeout_ms=3000, extra={"batch.num.messages": 10}
    )
    for _ in range(ROUNDS):
        producer.send(PER_ROUND)
        producer.flush()
        if producer.failed:
            break
        time.sleep(0.3)
    return producer


def assert_online(broker: BrokerProcess, topic: str = TOPIC) -> None:
    with RawClient(broker.port) as raw:
        partition, nodes = raw.partition_metadata(topic)
        assert raw.fetch_error(topic) == 0
    assert int(partition.error_code) != LEADER_NOT_AVAILABLE, partition
    assert [int(partition.leader_id)] == nodes, partition
    assert not list(partition.offline_replicas), partition


def assert_checkpoints_intact(data_dir: Path) -> None:
    assert not leftovers(data_dir), leftovers(data_dir)
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        path = data_dir / name
        if path.exists():
            OffsetCheckpointFile(path).read()  # raises ValueError if damaged


@pytest.mark.slow
@pytest.mark.parametrize(("rules", "offline"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_injected_fault_under_produce_load(
    tmp_path: Path, rules: str, offline: bool | None
) -> None:
    data_dir = tmp_path / "broker"
    broker = BrokerProcess(data_dir, config=CONFIG, env={FAULTS: rules.format(dir=data_dir)})
    try:
        broker.start()
        create_topic(broker.bootstrap, TOPIC)
        producer = produce_under_load(broker)
        kind = rules.split(":", 1)[0]
        assert f"injected into {kind}" in broker.logs(), f"{rules} never fired (or went unlogged)"

        if offline:
            assert_offline(broker, TOPIC)
        elif offline is False:
            assert not producer.failed, f"deliveries failed: {list(producer.failed.items())[:3]}"
            more = producer.produce(200)
            assert len(more) == 200, f"produce after {rules}: {producer.failed}"
            assert_online(broker)
            assert "is offline" not in broker.logs()
            check_all(broker.bootstrap, TOPIC, producer.acked)
        code = broker.stop()
        if offline is False:
            assert code == 0, broker.logs()[-5000:]
        assert_checkpoints_intact(data_dir)

        broker.env = None  # the next processes run without faults
        broker.start()
        check_all(broker.bootstrap, TOPIC, producer.acked)
        assert_online(broker)
        later = AckedProducer(broker.bootstrap, TOPIC, next_seq=100_000)
        assert len(later.produce(200)) == 200, later.failed
        acked = producer.acked | later.acked
        check_all(broker.bootstrap, TOPIC, acked)

        broker.kill()
        broker.start()
        check_all(broker.bootstrap, TOPIC, acked)
        assert broker.stop() == 0
        assert_checkpoints_intact(data_dir)
    finally:
        if broker.process is not None:
            broker.kill()


@pytest.mark.slow
@pytest.mark.parametrize("errno_name", ["ENOSPC", "EIO"])
def test_failed_metadata_write_refuses_create_topics(tmp_path: Path, errno_name: str) -> None:
    data_dir = tmp_path / "broker"
    metadata_file = data_dir / "weir-metadata.json"
    broker = BrokerProcess(data_dir, config=CONFIG)
    try:
        broker.start()
        create_topic(broker.bootstrap, TOPIC)
        producer = AckedProducer(broker.bootstrap, TOPIC)
        assert len(producer.produce(100)) == 100
        assert broker.stop() == 0
        before = metadata_file.read_bytes()

        broker.env = {FAULTS: f"metadata:write:1+:{errno_name}"}  # every metadata write fails
        broker.start()
        error = create_topic_error(broker.bootstrap, "refused")
        assert error is not None, "CreateTopics succeeded while metadata could not be written"
        assert error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
        assert "refused" not in topics(broker.bootstrap)
        # still serving: reads, and writes that need no metadata (no new producer id block)
        check_all(broker.bootstrap, TOPIC, producer.acked)
        plain = AckedProducer(
            broker.bootstrap, TOPIC, next_seq=100_000, extra={"enable.idempotence": False}
        )
        assert len(plain.produce(100)) == 100, plain.failed
        assert broker.stop() == 0
        assert metadata_file.read_bytes() == before
        assert not leftovers(data_dir), leftovers(data_dir)

        broker.env = None
        broker.start()
        assert "refused" not in topics(broker.bootstrap)
        check_all(broker.bootstrap, TOPIC, producer.acked | plain.acked)
        create_topic(broker.bootstrap, "refused")
        assert "refused" in topics(broker.bootstrap)
    finally:
        if broker.process is not None:
            broker.kill()


def log_dir_errors(broker: BrokerProcess) -> dict[str, str | None]:
    """Each log directory's error as `weir log-dirs describe` (DescribeLogDirs) reports it."""
    done = weir("log-dirs", "describe", "--bootstrap-server", broker.bootstrap)
    assert done.returncode == 0, done.stderr
    [described] = json.loads(done.stdout)["brokers"]
    return {d["logDir"]: d["error"] for d in described["logDirs"]}


@pytest.mark.slow
def test_a_failed_directory_takes_only_its_own_partitions_offline(tmp_path: Path) -> None:
    """JBOD (`log.dirs`): EIO on segment writes in one directory takes that directory's partition
    offline; the other directory's keeps taking and serving records; a restart recovers both."""
    dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    broker = BrokerProcess(tmp_path / "broker", config=CONFIG, log_dirs=dirs)
    try:
        broker.start()
        home: dict[Path, str] = {}
        for i in range(6):  # partitions are spread over the directories
            create_topic(broker.bootstrap, f"jbod-{i}")
            found = [d for d in dirs if (d / f"jbod-{i}-0").is_dir()]
            assert len(found) == 1, f"jbod-{i}-0 in {found}"
            home.setdefault(found[0], f"jbod-{i}")
            if len(home) == 2:
                break
        assert len(home) == 2, f"six topics, all in {list(home)}"
        assert broker.stop() == 0

        failing, healthy = home[dirs[1]], home[dirs[0]]
        broker.env = {FAULTS: f"segment:write:20:EIO:{dirs[1]}"}
        broker.start()
        extra = {"batch.num.messages": 10}
        doomed = AckedProducer(broker.bootstrap, failing, message_timeout_ms=3000, extra=extra)
        fine = AckedProducer(broker.bootstrap, healthy, next_seq=100_000, extra=extra)
        for _ in range(3):
            if not doomed.failed:  # once its directory is offline, every delivery times out
                doomed.send(200)
            fine.send(200)
            doomed.flush()
            fine.flush()
        assert "injected into segment" in broker.logs(), "the fault never fired"
        assert doomed.failed, "every record acknowledged in the failed directory"
        assert not fine.failed, f"the healthy directory failed: {list(fine.failed.items())[:3]}"
        assert_offline(broker, failing)
        assert_online(broker, healthy)
        assert log_dir_errors(broker) == {str(dirs[0]): None, str(dirs[1]): "KAFKA_STORAGE_ERROR"}
        assert len(fine.produce(100)) == 100, fine.failed
        check_all(broker.bootstrap, healthy, fine.acked)
        broker.stop()

        broker.env = None
        broker.start()
        for topic, producer in ((failing, doomed), (healthy, fine)):
            assert_online(broker, topic)
            check_all(broker.bootstrap, topic, producer.acked)
        assert len(doomed.produce(100)) == 100, "the recovered partition takes records again"
        check_all(broker.bootstrap, failing, doomed.acked)
        assert broker.stop() == 0
    finally:
        if broker.process is not None:
            broker.kill()
