"""`weir cluster up` as a user runs it: ZooKeeper and three brokers in three racks that a real
client sees, one ready line, and a clean stop on Ctrl-C with every child gone; a broker that dies
is named with the end of its log and the rest are stopped."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from cluster_processes import free_port, free_port_range, processes_mentioning, wait_until_gone
from confluent_kafka.admin import AdminClient

from weir.cli.cluster import plan_brokers

READY = "weir cluster ready: bootstrap "
READY_TIMEOUT = 120  # ZooKeeper, then three brokers, on a two-core machine


def cluster_up(weir_command, data_dir: Path, brokers: int, *extra: str):
    zookeeper_port, base_port = free_port(), free_port_range(brokers)
    command = weir_command("cluster", "up", "--brokers", str(brokers), "--data-dir", str(data_dir),
                           "--zookeeper-port", str(zookeeper_port), "--base-port", str(base_port),
                           *extra)  # fmt: skip
    return command, zookeeper_port, base_port


def test_three_brokers_in_three_racks(tmp_path, zookeeper_installation, weir_command):
    data_dir = tmp_path / "cluster"
    command, zookeeper_port, base = cluster_up(weir_command, data_dir, 3, "--racks", "a,b,c")
    ready = command.wait_for_line(READY, READY_TIMEOUT)
    bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
    assert ready == f"{READY}{bootstrap} zookeeper 127.0.0.1:{zookeeper_port}"

    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = admin.list_topics(timeout=10).brokers
    assert {node_id: (b.host, b.port) for node_id, b in brokers.items()} == {
        i: ("127.0.0.1", base + i - 1) for i in (1, 2, 3)
    }
    nodes = admin.describe_cluster(request_timeout=10).result().nodes
    assert {node.id: node.rack for node in nodes} == {1: "a", 2: "b", 3: "c"}

    command.process.send_signal(signal.SIGINT)
    assert command.wait(timeout=90) == 0
    assert command.stdout().splitlines() == [ready]
    assert wait_until_gone(f"{data_dir}/") == []


def test_a_broker_killed_later_stops_the_cluster(tmp_path, zookeeper_installation, weir_command):
    data_dir = tmp_path / "cluster"
    command, _, _ = cluster_up(weir_command, data_dir, 3)
    command.wait_for_line(READY, READY_TIMEOUT)
    [broker_2] = processes_mentioning(f"{data_dir}/broker-2 ")
    os.kill(broker_2, signal.SIGKILL)
    assert command.wait(timeout=90) == 1
    assert command.stderr().startswith(
        f"weir: broker 2 was killed by SIGKILL; the end of {data_dir}/broker-2.log:"
    )
    assert wait_until_gone(f"{data_dir}/") == []


def test_a_broker_that_cannot_start_is_reported(tmp_path, zookeeper_installation, weir_command):
    """Broker 2's data directory is a file, so it cannot start; whichever broker exits first is
    named, with the end of its own log, and nothing is left running."""
    data_dir = tmp_path / "cluster"
    data_dir.mkdir()
    (data_dir / "broker-2").write_text("not a directory\n")
    command, _, _ = cluster_up(weir_command, data_dir, 3)
    assert command.wait(timeout=READY_TIMEOUT) == 1
    assert command.stdout() == ""
    first, *tail = command.stderr().splitlines()
    name = first.removeprefix("weir: broker ").split(" ", 1)[0]
    assert first.startswith(f"weir: broker {name} exited with code 1; the end of ")
    assert first.endswith(f"{data_dir}/broker-{name}.log:")
    log = (data_dir / f"broker-{name}.log").read_text().splitlines()
    assert tail and tail == log[-len(tail) :]
    assert wait_until_gone(f"{data_dir}/") == []


def test_brokers_get_consecutive_ports_and_racks_in_turn(tmp_path):
    brokers = plan_brokers(tmp_path, 4, ["a", "b"], 9092)
    assert [(b.node_id, b.listen, b.rack) for b in brokers] == [
        (1, "127.0.0.1:9092", "a"),
        (2, "127.0.0.1:9093", "b"),
        (3, "127.0.0.1:9094", "a"),
        (4, "127.0.0.1:9095", "b"),
    ]
    assert brokers[2].command("127.0.0.1:2181")[-10:] == [
        "--zookeeper", "127.0.0.1:2181", "--node-id", "3",
        "--data-dir", str(tmp_path / "broker-3"), "--listen", "127.0.0.1:9094",
        "--rack", "a",
    ]  # fmt: skip
    assert "--rack" not in plan_brokers(tmp_path, 1, [], 9092)[0].command("127.0.0.1:2181")
