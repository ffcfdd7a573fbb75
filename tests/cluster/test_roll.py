"""`weir cluster roll` on a three-broker `weir cluster up`, as an operator rolls a cluster.

Under idempotent acks=all load on a topic with replication factor 3 and min.insync.replicas 2,
the roll restarts every broker once through the control socket (node-id order, the controller
last); afterwards every acknowledged record is read back exactly once at the offset it was
acknowledged at, the producer saw only retriable errors, and every partition has its full ISR
and its preferred leader. A `--command` that fails stops the roll with a clear message and
restarts nothing after it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from cluster_brokers import create_topics, metadata_of, poll, toml_text
from cluster_processes import READY, READY_TIMEOUT, cluster_up, processes_mentioning
from confluent_kafka.admin import AdminClient, NewTopic
from faultkit import History, ProducerWorker, check, close_client, read_everything

TOPIC = "rolled"
PARTITIONS = 6
RATE = 100.0  # records per second, round-robin over the partitions
#: the producer stops after this many records even if the roll has not ended (it then fails)
RECORD_LIMIT = 60_000
ROLL_TIMEOUT = 480  # three restarts, each a controlled shutdown, a start and a catch-up
BROKER_CONFIG: dict[str, object] = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
}
#: what a producer may see while brokers restart: connections closed, leaders moving, an ISR
#: briefly below min.insync.replicas. librdkafka retries all of them.
#: the roll's line once a restarted broker is back in every ISR: (node id, seconds, how many
#: partitions were under-replicated when it came back)
CAUGHT_UP = (r"^Broker (\d+): all \d+ partitions fully replicated after ([\d.]+)s "
             r"\((\d+) under-replicated when it came back\)")  # fmt: skip
RETRIABLE = frozenset({
    "_TRANSPORT", "_TIMED_OUT", "REQUEST_TIMED_OUT", "NOT_LEADER_FOR_PARTITION",
    "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
})  # fmt: skip


def start_cluster(weir_command, tmp_path: Path) -> tuple[Path, str, list[tuple[str, int]]]:
    """`weir cluster up --brokers 3`: (its data directory, bootstrap, broker addresses)."""
    data_dir = tmp_path / "cluster"
    config = tmp_path / "broker.toml"
    config.write_text(toml_text(BROKER_CONFIG))
    command, _, base = cluster_up(weir_command, data_dir, 3, "--broker-config", str(config))
    command.wait_for_line(READY, READY_TIMEOUT)
    addresses = [("127.0.0.1", base + i) for i in range(3)]
    return data_dir, ",".join(f"{h}:{p}" for h, p in addresses), addresses


def broker_pids(data_dir: Path) -> dict[int, list[int]]:
    return {n: processes_mentioning(f"{data_dir}/broker-{n} ") for n in (1, 2, 3)}


def roll(*args: str, timeout: float = ROLL_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", "cluster", "roll", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip


def settled_controller(addresses: list[tuple[str, int]]) -> int:
    """The controller every broker names once all three list each other."""

    def agreed() -> int | None:
        views = [metadata_of(a) for a in addresses]
        controllers = {v.controller for v in views}
        if len(controllers) == 1 and all(sorted(v.brokers) == [1, 2, 3] for v in views):
            return controllers.pop() if controllers <= {1, 2, 3} else None
        return None

    return poll(agreed, 60, "three brokers listed everywhere, one controller")


def fully_replicated_and_preferred(addresses: list[tuple[str, int]]) -> list[str]:
    """The partitions, as any broker shows them, without their full ISR or preferred leader."""
    wrong = []
    for address in addresses:
        for topic, partitions in metadata_of(address).topics.items():
            for index, p in partitions.items():
                if sorted(p.isr) != sorted(p.replicas) or p.leader != p.replicas[0]:
                    wrong.append(f"{address[1]}: {topic}-{index} {p}")
    return wrong


def test_a_roll_under_load_loses_nothing_and_ends_balanced(tmp_path, weir_command, figure):
    data_dir, bootstrap, addresses = start_cluster(weir_command, tmp_path)
    controller = settled_controller(addresses)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}))
    del admin
    before = broker_pids(data_dir)
    history = History()
    producer = ProducerWorker(0, bootstrap, TOPIC, PARTITIONS, RATE, history, limit=RECORD_LIMIT)
    producer.start()
    try:
        poll(lambda: len(history.acked) > 300, 60, "acknowledgements before the roll")
        started = time.monotonic()
        done = roll("--data-dir", str(data_dir), "--bootstrap-server", bootstrap)
        took = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        assert producer.is_alive(), "the producer ran out of records before the roll ended"
        acked = len(history.acked)
        poll(lambda: len(history.acked) > acked + 300, 60, "acknowledgements after the roll")
    finally:
        producer.stop()
        producer.join(90)
        close_client(producer)

    order = [n for n in (1, 2, 3) if n != controller] + [controller]
    restarted = [int(n) for n, _ in re.findall(r"^Broker (\d+): restarted in ([\d.]+)s",
                                               done.stdout, re.M)]  # fmt: skip
    assert restarted == order, done.stdout
    assert done.stdout.splitlines()[-1].startswith("Rolled 3 brokers in ")
    caught_up = re.findall(CAUGHT_UP, done.stdout, re.M)
    assert [int(n) for n, _, _ in caught_up] == order, done.stdout
    # the controlled shutdown took each broker out of every ISR, so the roll had to wait
    assert all(int(lagging) > 0 for _, _, lagging in caught_up), done.stdout
    after = broker_pids(data_dir)
    for n in (1, 2, 3):
        assert len(before[n]) == len(after[n]) == 1 and before[n] != after[n], (n, before, after)
    assert poll(lambda: not fully_replicated_and_preferred(addresses), 30,
                "full ISR and preferred leaders everywhere")  # fmt: skip
    assert fully_replicated_and_preferred(addresses) == []

    assert producer.unflushed == 0 and history.fatal == []
    assert history.send_errors == {}, "a record was not delivered"
    assert history.sent == len(history.acked), "every record sent was acknowledged"
    assert set(history.client_errors) <= RETRIABLE, history.client_errors
    ends = read_everything(bootstrap, TOPIC, PARTITIONS, history)
    verdict = check(history, ends)
    assert verdict.lost == [] and verdict.duplicated == [] and verdict.divergent == [], verdict
    assert verdict.gaps == [] and verdict.read_final == verdict.acked, verdict

    figure("roll of 3 brokers under 100 msgs/s acks=all", took)
    for n, seconds in re.findall(r"^Broker (\d+): restarted in ([\d.]+)s", done.stdout, re.M):
        figure(f"broker {n} restart (controlled shutdown + start)", float(seconds))
    for n, seconds, _ in caught_up:
        figure(f"broker {n} back in every ISR", float(seconds))
    figure("records acknowledged", verdict.acked, "records")
    for name, count in sorted(history.client_errors.items()):
        figure(f"producer error {name}", count, "times")
    print(done.stdout)


def test_a_failing_command_stops_the_roll_and_restarts_nothing_after_it(tmp_path, weir_command):
    refused = roll("--command", "systemctl restart weir", timeout=60)
    assert refused.returncode == 2
    assert refused.stderr == ("weir: --command must name the broker with {id}, as in "
                              "'systemctl restart weir@{id}'\n")  # fmt: skip

    data_dir, bootstrap, addresses = start_cluster(weir_command, tmp_path)
    controller = settled_controller(addresses)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, 2, 3))
    del admin
    first, second, third = [n for n in (1, 2, 3) if n != controller] + [controller]
    before = broker_pids(data_dir)
    restart = f"{sys.executable} -m weir.cli.main cluster restart-broker {{id}} " \
              f"--data-dir {data_dir}"  # fmt: skip
    command = f"if [ {{id}} = {second} ]; then echo 'broker {{id}} refused' >&2; exit 3; fi; " \
              f"{restart}"  # fmt: skip
    done = roll("--command", command, "--bootstrap-server", bootstrap, "--timeout", "120")
    assert done.returncode == 1, done.stdout + done.stderr
    ran = command.replace("{id}", str(second))
    assert done.stderr == (f"weir: broker {second}: `{ran}` exited with status 3: broker "
                           f"{second} refused; the roll stopped, broker {third} not "
                           "restarted\n")  # fmt: skip
    assert re.search(rf"^Broker {first}: restarted in [\d.]+s \(`", done.stdout, re.M), done.stdout
    assert f"Broker {second}:" not in done.stdout
    after = broker_pids(data_dir)
    assert after[first] != before[first], "the first broker was restarted by the command"
    assert (after[second], after[third]) == (before[second], before[third])

    elsewhere = tmp_path / "no-cluster"
    missing = roll("--data-dir", str(elsewhere), "--bootstrap-server", bootstrap, timeout=120)
    assert missing.returncode == 1
    assert missing.stderr == (f"weir: broker {first}: no `weir cluster up` is running with data "
                              f"directory {elsewhere}; the roll stopped, brokers {second}, "
                              f"{third} not restarted\n")  # fmt: skip
    assert broker_pids(data_dir) == after

    stop = weir_command("cluster", "stop-broker", str(third), "--data-dir", str(data_dir))
    assert stop.wait(timeout=90) == 0, stop.stderr()
    short = roll("--data-dir", str(data_dir), "--bootstrap-server", bootstrap, "--timeout", "2",
                 timeout=120)  # fmt: skip
    assert short.returncode == 1
    first_line, *rest = short.stderr.splitlines()
    assert rest == [] and first_line.startswith("weir: not rolling: not fully replicated after "
                                                "2s: "), short.stderr  # fmt: skip
    for index in range(2):
        assert re.search(rf"{TOPIC}-{index} \(leader \d, replicas [\d,]+, isr (?![^)]*{third})",
                         first_line), first_line  # fmt: skip
    assert {n: p for n, p in broker_pids(data_dir).items() if n != third} == {
        n: p for n, p in after.items() if n != third
    }
