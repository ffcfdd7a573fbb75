"""The console commands' output as a user reads it, against a real broker: tables whose columns
fit their widest value (a consumer's long member id), and output into a pipe whose reader has
gone (`| head -1`) that ends quietly, with the status a shell gives a command SIGPIPE ended."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess, table_rows, weir
from confluent_kafka import Consumer

GROUP = "console-readers"
TOPIC = "console-events"
LONG_CLIENT_ID = "a-consumer-whose-client-id-is-long-enough-to-widen-its-columns"
TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("console") / "broker")
    process.start()
    _ok(weir("topic", "create", TOPIC, "--partitions", "2", "--bootstrap-server",
             process.bootstrap))  # fmt: skip
    for partition in ("0", "1"):
        lines = "".join(f"event {i}\n" for i in range(5))
        _ok(weir("produce", TOPIC, "--partition", partition, "--bootstrap-server",
                 process.bootstrap, input=lines))  # fmt: skip
    yield process
    if process.process is not None:
        process.stop()


@pytest.fixture(scope="module")
def member(broker: BrokerProcess) -> Iterator[Consumer]:
    """A member of GROUP owning both partitions, with its offsets committed."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                         "client.id": LONG_CLIENT_ID, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "log_level": 0})  # fmt: skip
    consumer.subscribe([TOPIC])
    read = 0
    deadline = time.monotonic() + TIMEOUT
    while read < 10 or len(consumer.assignment()) < 2:
        assert time.monotonic() < deadline, f"read {read}, assigned {consumer.assignment()}"
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    yield consumer
    consumer.close()


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr


def test_group_describe_columns_fit_a_long_member_id(
    broker: BrokerProcess, member: Consumer
) -> None:
    shown = weir("group", "describe", GROUP, "--bootstrap-server", broker.bootstrap)
    assert shown.returncode == 0, shown.stderr
    rows = table_rows(shown.stdout, "TOPIC")
    member_id = member.memberid()
    assert len(member_id) > len(LONG_CLIENT_ID)
    assert [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["CONSUMER-ID"], r["CLIENT-ID"])
            for r in rows] == [(TOPIC, str(p), str(end), member_id, LONG_CLIENT_ID)
                               for p, end in _ends(rows)]  # fmt: skip
    assert all(r["LAG"] == "0" and r["HOST"] for r in rows)


def _ends(rows: list[dict[str, str]]) -> list[tuple[int, int]]:
    return [(int(r["PARTITION"]), int(r["LOG-END-OFFSET"])) for r in rows]


def closed_pipe() -> int:
    """The writing end of a pipe whose reader has gone, as after `| head -1` read its line."""
    reader, writer = os.pipe()
    os.close(reader)
    return writer


@pytest.mark.parametrize(
    "command",
    [
        ("topic", "describe"),
        ("topic", "list"),
        ("group", "describe", GROUP),
        ("group", "list"),
        ("consume", TOPIC, "--from-beginning", "-e"),
        ("txn", "list"),
    ],
    ids=" ".join,
)
def test_output_into_a_closed_pipe_ends_quietly(
    broker: BrokerProcess, member: Consumer, command: tuple[str, ...]
) -> None:
    writer = closed_pipe()
    try:
        done = weir(*command, "--bootstrap-server", broker.bootstrap, stdout=writer)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (128 + 13, "")
