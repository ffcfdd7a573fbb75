"""DescribeLogDirs on a broker with two log directories (`log.dirs`): kafka-python's
`describe_log_dirs` and `weir log-dirs describe` see each directory with the replicas it holds,
their sizes as the segment files on disk have them, and the volume's size."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess, weir

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

TOPIC = "sizes"
PARTITIONS = 4
RECORDS_PER_PARTITION = 50


@pytest.fixture
def jbod(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[Path]]]:
    dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    broker = BrokerProcess(tmp_path / "broker", log_dirs=dirs)
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1), NewTopic("other", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        for partition in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION * (partition + 1)):
                producer.send(TOPIC, b"x" * 100 + b"%d" % i, partition=partition)
        producer.flush(30)
    finally:
        producer.close()
    yield broker, dirs
    broker.stop()


def sizes_on_disk(dirs: list[Path]) -> dict[str, tuple[Path, int]]:
    """partition directory name -> (its log directory, the bytes of its .log files)."""
    found = {}
    for log_dir in dirs:
        for partition_dir in log_dir.glob(f"{TOPIC}-*"):
            size = sum(f.stat().st_size for f in partition_dir.glob("*.log"))
            found[partition_dir.name] = (log_dir, size)
    return found


def test_kafka_python_sees_each_directory_with_its_replicas_and_sizes(
    jbod: tuple[BrokerProcess, list[Path]],
) -> None:
    broker, dirs = jbod
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    on_disk = sizes_on_disk(dirs)
    assert len(on_disk) == PARTITIONS
    assert {d for d, _ in on_disk.values()} == set(dirs), "the partitions are spread over both"
    described = {result["log_dir"]: result for result in answer["log_dirs"]}
    assert set(described) == {str(d.absolute()) for d in dirs}
    seen = {}
    for path, result in described.items():
        assert result["error_code"] == 0
        for topic in result["topics"]:
            for p in topic["partitions"]:
                seen[f"{topic['name']}-{p['partition_index']}"] = (Path(path), p["partition_size"])
                assert p["offset_lag"] == 0 and p["is_future_key"] is False
        assert 0 < result["usable_bytes"] <= result["total_bytes"]  # v4, kafka-python's choice
    assert {k: v for k, v in seen.items() if k.startswith(f"{TOPIC}-")} == on_disk
    assert "other-0" in seen
    sizes = [on_disk[f"{TOPIC}-{p}"][1] for p in range(PARTITIONS)]
    assert sizes == sorted(sizes) and sizes[0] > RECORDS_PER_PARTITION * 100


def test_weir_log_dirs_describe_prints_what_kafka_log_dirs_prints(
    jbod: tuple[BrokerProcess, list[Path]],
) -> None:
    broker, dirs = jbod
    done = weir("log-dirs", "describe", "--bootstrap-server", broker.bootstrap,
                "--topic-list", TOPIC, "--broker-list", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Received log directory information from brokers 0" in done.stderr
    document = json.loads(done.stdout)
    assert document["version"] == 1
    [described] = document["brokers"]
    assert described["broker"] == 0
    partitions = {
        p["partition"]: (Path(d["logDir"]), p["size"])
        for d in described["logDirs"]
        for p in d["partitions"]
    }
    assert partitions == sizes_on_disk(dirs)  # the topic asked for, and nothing else
    assert all(d["error"] is None and d["usableBytes"] > 0 for d in described["logDirs"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--broker-list", "7"), "no broker 7 in the cluster"),
        (("--broker-list", "one"), "--broker-list takes broker ids"),
        (("--topic-list", "nope"), "unknown topic nope"),
    ],
)
def test_weir_log_dirs_describe_refuses_what_the_cluster_lacks(
    broker: BrokerProcess, args: tuple[str, ...], message: str
) -> None:
    done = weir("log-dirs", "describe", "--bootstrap-server", broker.bootstrap, *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert done.stdout == ""
