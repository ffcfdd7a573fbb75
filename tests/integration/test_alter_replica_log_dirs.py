"""AlterReplicaLogDirs on a broker with two log directories (`log.dirs`): a partition moved to
the other directory under a real producer's load (confluent-kafka, acks=all), with
`weir reassign execute`'s `log_dirs` and its throttle, seen moving by kafka-python's
DescribeLogDirs, every acknowledged record read back once at its offset afterwards; and the
requests and commands that name what the broker lacks, answered with Kafka's errors and
changing nothing."""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, weir
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

import waiting
from weir.cli.broker_socket import BrokerConnection
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka.admin import KafkaAdminClient

TOPIC = "moving"
PREFILL_RECORDS = 6000
VALUE = b"v" * 1000
THROTTLE = 2_000_000  # bytes per second: the move of the prefill takes a few seconds


@pytest.fixture
def jbod(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[Path]]]:
    dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    broker = BrokerProcess(tmp_path / "broker", log_dirs=dirs)
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "524288"})])
    created[TOPIC].result(30)
    yield broker, dirs
    if broker.process is not None:
        broker.stop()


class LoadProducer:
    """confluent-kafka producing to the topic from a thread (acks=all, idempotent), keeping
    each acknowledged record's offset and value."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
        self.acked: dict[int, bytes] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.errors.append(str(error))
        else:
            self.acked[message.offset()] = message.value()

    def send(self, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(TOPIC, value, partition=0, on_delivery=self._delivered)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.send(b"load-%08d" % i)
            i += 1
            time.sleep(0.001)

    def __enter__(self) -> LoadProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(30) == 0


def replicas(broker: BrokerProcess) -> dict[tuple[str, bool], dict[str, int]]:
    """(log dir, is future) -> {partition_size, offset_lag} of the topic's partition 0, as
    kafka-python's DescribeLogDirs says."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    return {
        (result["log_dir"], p["is_future_key"]): {"size": p["partition_size"],
                                                   "lag": p["offset_lag"]}
        for result in answer["log_dirs"] for topic in result["topics"] if topic["name"] == TOPIC
        for p in topic["partitions"]
    }  # fmt: skip


def read_all(bootstrap: str, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                seen.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return seen


def plan(path: Path, log_dir: Path | str) -> Path:
    entry = {"topic": TOPIC, "partition": 0, "replicas": [0], "log_dirs": [str(log_dir)]}
    path.write_text(json.dumps({"version": 1, "partitions": [entry]}))
    return path


def test_a_partition_moves_to_the_other_directory_under_load_and_loses_nothing(
    jbod: tuple[BrokerProcess, list[Path]], tmp_path: Path
) -> None:
    broker, dirs = jbod
    with LoadProducer(broker.bootstrap) as load:
        for _ in range(PREFILL_RECORDS):
            load.send(VALUE)
        assert load.producer.flush(60) == 0
        [(source, _)] = replicas(broker)
        target = next(str(d) for d in dirs if str(d) != source)
        size = replicas(broker)[(source, False)]["size"]
        started = time.monotonic()
        done = weir("reassign", "execute", "--bootstrap-server", broker.bootstrap,
                    "--reassignment-json-file", plan(tmp_path / "plan.json", target),
                    "--replica-alter-log-dirs-throttle", str(THROTTLE))  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"Successfully started log directory move for: {TOPIC}-0-0" in done.stdout
        moving = waiting.poll(lambda: replicas(broker).get((target, True)), 20,
                              "the future replica in the target directory")  # fmt: skip
        assert (source, False) in replicas(broker)
        assert moving["size"] < size
        waiting.poll(lambda: set(replicas(broker)) == {(target, False)}, 60,
                     "the move to finish", interval=0.2)  # fmt: skip
        seconds = time.monotonic() - started
        time.sleep(1)  # the load goes on into the new directory
    assert not load.errors
    assert size / seconds < THROTTLE * 1.5, f"{size} bytes moved in {seconds:.1f}s"
    print(f"moved {size} bytes in {seconds:.2f}s under a {THROTTLE} B/s throttle")

    source_dir, target_dir = Path(source), Path(target)
    assert not (source_dir / f"{TOPIC}-0").exists()
    assert any((target_dir / f"{TOPIC}-0").glob("*.log"))
    assert not [p for d in dirs for p in d.iterdir() if p.name.endswith(("-future", "-delete"))]
    seen = read_all(broker.bootstrap, len(load.acked))
    assert len(seen) == len({offset for offset, _ in seen}), "a record read twice"
    assert dict(seen) == load.acked and len(load.acked) > PREFILL_RECORDS

    broker.restart()
    assert set(replicas(broker)) == {(target, False)}
    assert len(read_all(broker.bootstrap, len(load.acked))) == len(load.acked)


def alter(broker: BrokerProcess, path: str, topic: str = TOPIC) -> ErrorCode:
    request = AlterReplicaLogDirsRequest(dirs=(AlterReplicaLogDir(path=path, topics=(
        AlterReplicaLogDirTopic(name=TopicName(topic), partitions=(i32(0),)),)),))  # fmt: skip
    with BrokerConnection("127.0.0.1", broker.port, ClientSecurity(), timeout=30,
                          client_id="test") as conn:  # fmt: skip
        response = conn.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, request)
    [result] = response.results
    assert result.topic_name == topic
    [partition] = result.partitions
    return partition.error_code


def test_what_the_broker_lacks_is_answered_with_kafka_errors_and_changes_nothing(
    jbod: tuple[BrokerProcess, list[Path]], tmp_path: Path
) -> None:
    broker, dirs = jbod
    [(source, _)] = replicas(broker)
    target = next(str(d) for d in dirs if str(d) != source)
    assert alter(broker, "/no/such/dir") is ErrorCode.log_dir_not_found
    assert alter(broker, Path(target).name) is ErrorCode.log_dir_not_found  # not absolute
    assert alter(broker, target, topic="nosuch") is ErrorCode.replica_not_available
    assert alter(broker, source) is ErrorCode.none  # already there: nothing to do
    for args, message in [
        (("log-dirs", "move", "--broker", "0", "--topic", TOPIC, "--partition", "0",
          "--dir", "dir-b"), "--dir 'dir-b' is not an absolute path"),
        (("log-dirs", "move", "--broker", "0", "--topic", TOPIC, "--partition", "0",
          "--dir", "/no/such/dir"), "broker 0 has no log directory /no/such/dir"),
        (("reassign", "execute", "--reassignment-json-file", plan(tmp_path / "p.json", "dir-b")),
         "log directory 'dir-b' of broker 0 is not an absolute path"),
        (("log-dirs", "move", "--broker", "0", "--topic", "nosuch", "--partition", "0",
          "--dir", target), "nosuch-0 on broker 0: REPLICA_NOT_AVAILABLE"),
    ]:  # fmt: skip
        done = weir(*args, "--bootstrap-server", broker.bootstrap)
        assert done.returncode != 0 and message in done.stderr, done.stderr
    time.sleep(0.5)
    assert set(replicas(broker)) == {(source, False)}
    assert not [p for d in dirs for p in d.iterdir() if p.name.endswith("-future")]


def test_weir_log_dirs_move_waits_for_the_move(
    jbod: tuple[BrokerProcess, list[Path]],
) -> None:
    broker, dirs = jbod
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(500):
        producer.produce(TOPIC, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    [(source, _)] = replicas(broker)
    target = next(str(d) for d in dirs if str(d) != source)
    done = weir("log-dirs", "move", "--bootstrap-server", broker.bootstrap, "--broker", "0",
                "--topic", TOPIC, "--partition", "0", "--dir", target, "--wait")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"{TOPIC}-0 is in {target}" in done.stdout
    assert set(replicas(broker)) == {(target, False)}
    assert [v for _, v in read_all(broker.bootstrap, 500)] == [b"%d" % i for i in range(500)]


def test_a_broker_killed_mid_move_keeps_its_log_and_resumes_the_move_at_start(
    jbod: tuple[BrokerProcess, list[Path]], tmp_path: Path
) -> None:
    broker, dirs = jbod
    with LoadProducer(broker.bootstrap) as load:
        for _ in range(PREFILL_RECORDS // 2):
            load.send(VALUE)
        assert load.producer.flush(60) == 0
    [(source, _)] = replicas(broker)
    target = next(str(d) for d in dirs if str(d) != source)
    done = weir("reassign", "execute", "--bootstrap-server", broker.bootstrap,
                "--reassignment-json-file", plan(tmp_path / "plan.json", target),
                "--replica-alter-log-dirs-throttle", "500000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    waiting.poll(lambda: replicas(broker).get((target, True)), 20, "the future replica")
    assert [p for p in Path(target).iterdir() if p.name.endswith("-future")]
    broker.kill()

    broker.start()  # the throttle still holds: the move resumes slowly
    assert set(replicas(broker)) == {(source, False), (target, True)}
    assert dict(read_all(broker.bootstrap, len(load.acked))) == load.acked
    again = weir("reassign", "execute", "--bootstrap-server", broker.bootstrap,
                 "--reassignment-json-file", plan(tmp_path / "plan.json", target),
                 "--replica-alter-log-dirs-throttle", str(2**63 - 1))  # fmt: skip
    assert again.returncode == 0, again.stderr  # asked again: the move under way goes on
    waiting.poll(lambda: set(replicas(broker)) == {(target, False)}, 60, "the move to finish")
    assert dict(read_all(broker.bootstrap, len(load.acked))) == load.acked
    assert not [p for d in dirs for p in d.iterdir() if p.name.endswith(("-future", "-delete"))]
