"""`weir cluster up` as a user runs it: ZooKeeper and three brokers in three racks that a real
client sees, one ready line, and a clean stop on Ctrl-C with every child gone; a broker that dies
is named with the end of its log while the rest keep serving, and can be restarted."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from cluster_processes import (
    READY,
    READY_TIMEOUT,
    cluster_up,
    free_port_range,
    processes_mentioning,
    wait_until_gone,
)
from confluent_kafka.admin import AdminClient
from faultkit import poll

from metrics_scrape import scrape, total
from weir.cli.cluster import plan_brokers


def test_three_brokers_in_three_racks(tmp_path, zookeeper_installation, weir_command):
    data_dir = tmp_path / "cluster"
    metrics_base = free_port_range(3)
    racks_and_metrics = ("--racks", "a,b,c", "--metrics-base-port", str(metrics_base))
    command, zookeeper_port, base = cluster_up(weir_command, data_dir, 3, *racks_and_metrics)
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

    def active_controllers() -> list[float]:
        return sorted(
            total(scrape(f"http://127.0.0.1:{metrics_base + i}/metrics"),
                  "kafka_controller_kafkacontroller_activecontrollercount")
            for i in range(3)
        )  # fmt: skip

    poll(lambda: active_controllers() == [0, 0, 1], 30, "one broker's metrics name it controller")

    command.process.send_signal(signal.SIGINT)
    assert command.wait(timeout=90) == 0
    assert command.stdout().splitlines() == [ready]
    assert wait_until_gone(f"{data_dir}/") == []


def test_a_killed_broker_is_reported_the_others_serve_and_it_can_be_restarted(
    tmp_path, zookeeper_installation, weir_command
):
    """A failover drill: kill -9 one broker; `cluster up` names it and keeps the others; `weir
    cluster restart-broker` brings it back (waiting out its old ZooKeeper session) and
    `stop-broker` stops another without it being reported as a death."""
    data_dir = tmp_path / "cluster"
    command, _, base = cluster_up(weir_command, data_dir, 3)
    command.wait_for_line(READY, READY_TIMEOUT)
    [broker_2] = processes_mentioning(f"{data_dir}/broker-2 ")
    os.kill(broker_2, signal.SIGKILL)
    death = "weir: broker 2 was killed by SIGKILL; the others keep running"
    poll(lambda: command.stderr().startswith(death), 30, "the death reported")
    assert f"the end of {data_dir}/broker-2.log:" in command.stderr()
    assert command.process.poll() is None
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{base}", "log_level": 0})
    poll(lambda: set(admin.list_topics(timeout=10).brokers) == {1, 3}, 60, "1 and 3 listed")

    restart = weir_command("cluster", "restart-broker", "2", "--data-dir", str(data_dir))
    assert restart.wait(timeout=180) == 0, restart.stderr()
    assert restart.stdout() == f"broker 2 ready on 127.0.0.1:{base + 1}\n"
    poll(lambda: set(admin.list_topics(timeout=10).brokers) == {1, 2, 3}, 60, "2 is back")

    stop = weir_command("cluster", "stop-broker", "3", "--data-dir", str(data_dir))
    assert stop.wait(timeout=90) == 0, stop.stderr()
    assert stop.stdout() == "broker 3 stopped\n"
    assert wait_until_gone(f"{data_dir}/broker-3 ") == []

    unknown = weir_command("cluster", "restart-broker", "7", "--data-dir", str(data_dir))
    assert unknown.wait(timeout=30) == 1
    assert unknown.stderr() == "weir: no broker 7 in this cluster (brokers 1..3)\n"

    command.process.send_signal(signal.SIGTERM)
    assert command.wait(timeout=90) == 0
    assert command.stderr().count("weir: broker ") == 1  # broker 3 was stopped, not dead
    assert wait_until_gone(f"{data_dir}/") == []


def test_control_commands_without_a_running_cluster_say_so(tmp_path, weir_command):
    command = weir_command("cluster", "stop-broker", "1", "--data-dir", str(tmp_path / "none"))
    assert command.wait(timeout=30) == 1
    assert command.stderr() == (
        f"weir: no `weir cluster up` is running with data directory {tmp_path / 'none'}\n"
    )


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


def test_metrics_ports_follow_the_base_and_deploy_prometheus_yml_scrapes_them(tmp_path):
    brokers = plan_brokers(tmp_path, 3, [], 9092, metrics_base_port=9308)
    assert [b.command("127.0.0.1:2181")[-2:] for b in brokers] == [
        ["--metrics-port", "9308"], ["--metrics-port", "9309"], ["--metrics-port", "9310"],
    ]  # fmt: skip
    assert "--metrics-port" not in plan_brokers(tmp_path, 1, [], 9092)[0].command("zk:2181")
    deploy = Path(__file__).parents[2] / "deploy" / "prometheus.yml"
    targets = re.findall(r'targets: \["([^"]+)"\]', deploy.read_text())
    assert targets == [f"127.0.0.1:{b.metrics_port}" for b in brokers]
