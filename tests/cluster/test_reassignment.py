"""Partition reassignment on real clusters.

Four brokers under acks=all load: kafka-python's `alter_partition_reassignments` moves
partitions onto other brokers (one of them new to the topic), `list_partition_reassignments`
shows the moves until they are done, every broker's Metadata then lists the target replicas, the
old replicas' logs are gone from their disks, and no acknowledged record is lost or written
twice. Three brokers: `weir reassign execute|verify` takes a partition from one replica to three
and back to two (its leader leaving), every record still there; bad plans are refused. Faults
mid-move (the controller and the leaving leader killed -9), and `weir cluster drain`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from cluster_brokers import (
    CHROOT,
    create_topics,
    metadata_of_all,
    poll,
    timed_poll,
    wait_settled,
)
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from faultkit import History, ProducerWorker, check, close_client, read_everything

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

TOPIC = "moving"
CONFIG: dict[str, object] = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
}
#: partition -> (replicas before, replicas after)
MOVES = {0: ([1, 2], [3, 4]), 1: ([2, 3], [4, 2]), 2: ([3, 1], [1, 3])}


def ongoing(admin: KafkaAdminClient) -> dict[int, dict[str, list[int]]]:
    listed = admin.list_partition_reassignments()
    return {tp.partition: moves for tp, moves in listed.items() if tp.topic == TOPIC}


@pytest.mark.slow
def test_partitions_move_under_load_with_nothing_lost(zookeeper, cluster_brokers, figure):
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 4, config=CONFIG)
    wait_settled(brokers.values())
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, len(MOVES), replica_assignment=[before for before, _ in
                                                             MOVES.values()],
                                  config={"min.insync.replicas": "2"}))  # fmt: skip
    del admin
    history = History()
    producer = ProducerWorker(0, bootstrap, TOPIC, len(MOVES), 300.0, history)
    producer.start()
    kafka_admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        poll(lambda: len(history.acked) > 300, 60, "acknowledgements before the move")
        started = time.monotonic()
        answers = kafka_admin.alter_partition_reassignments(
            {TopicPartition(TOPIC, p): after for p, (_, after) in MOVES.items()}
        )
        assert answers == {TopicPartition(TOPIC, p): None for p in MOVES}, answers
        under_way = ongoing(kafka_admin)
        assert set(under_way) <= set(MOVES), under_way
        poll(lambda: not ongoing(kafka_admin), 90, "every move complete")
        figure("three partition moves under 300 msgs/s acks=all", time.monotonic() - started)
        acked_at_end = len(history.acked)
        poll(lambda: len(history.acked) > acked_at_end + 300, 60, "acknowledgements after it")
    finally:
        producer.stop()
        producer.join(90)
        close_client(producer)
        kafka_admin.close()

    def moved() -> bool:
        for view in metadata_of_all(brokers.values()).values():
            partitions = view.topics.get(TOPIC, {})
            for index, (_, after) in MOVES.items():
                shown = partitions.get(index)
                if shown is None or list(shown.replicas) != after or shown.leader not in after:
                    return False
        return True

    poll(moved, 30, "every broker's Metadata lists the target replicas and leaders among them")
    for index, (_, after) in MOVES.items():
        for node_id, broker in brokers.items():
            held = (broker.data_dir / f"{TOPIC}-{index}").exists()
            if node_id in after:
                assert held, f"broker {node_id} lacks {TOPIC}-{index}"
            else:
                gone = broker.data_dir / f"{TOPIC}-{index}"
                poll(lambda gone=gone: not gone.exists(), 30,  # type: ignore[misc]
                     f"{TOPIC}-{index} deleted from broker {node_id}")  # fmt: skip
    assert producer.unflushed == 0
    ends = read_everything(bootstrap, TOPIC, len(MOVES), history)
    verdict = check(history, ends)
    errors = {"send": dict(history.send_errors), "client": dict(history.client_errors)}
    assert verdict.lost == [] and verdict.duplicated == [] and verdict.divergent == [], (
        verdict, errors)
    figure("records acknowledged", verdict.acked, "records")


def weir(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def plan(path: Path, targets: dict[int, list[int]], topic: str) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in targets.items()]}))
    return path


@pytest.mark.slow
def test_weir_reassign_changes_the_replication_factor_up_and_down(
    zookeeper, cluster_brokers, tmp_path, figure
):
    """RF 1 -> 3 -> 2 with `weir reassign execute` and `verify` (the leader leaves in the
    second move), then the records are all still there; bad plans are refused, nothing moved."""
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 3, config=CONFIG)
    wait_settled(brokers.values())
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic("rf", 1, replica_assignment=[[1]]))
    del admin
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for i in range(1000):
        producer.produce("rf", b"r%d" % i, partition=0)
    assert producer.flush(30) == 0
    del producer

    def verified(path: Path) -> bool:
        done = weir("reassign", "verify", "--reassignment-json-file", str(path),
                    "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return "is completed." in done.stdout

    for targets, name in (({0: [1, 2, 3]}, "RF 1 -> 3"), ({0: [2, 3]}, "RF 3 -> 2")):
        path = plan(tmp_path / f"plan-{len(targets[0])}.json", targets, "rf")
        started = time.monotonic()
        done = weir("reassign", "execute", "--reassignment-json-file", str(path),
                    "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Successfully started partition reassignments for rf-0" in done.stdout
        poll(lambda path=path: verified(path), 60, f"{name} complete")  # type: ignore[misc]
        figure(f"{name} of 1000 records", time.monotonic() - started)

        def shown(targets: dict[int, list[int]] = targets) -> bool:
            views = metadata_of_all(brokers.values()).values()
            shown = [v.topics.get("rf", {}).get(0) for v in views]
            return all(p is not None and sorted(p.replicas) == sorted(targets[0])
                       and sorted(p.isr) == sorted(targets[0]) for p in shown)

        poll(shown, 30, f"{name}: replicas and ISR everywhere")
    poll(lambda: not (brokers[1].data_dir / "rf-0").exists(), 30, "rf-0 deleted from broker 1")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rf-check",
                         "auto.offset.reset": "earliest", "log_level": 0})  # fmt: skip
    values: set[bytes] = set()
    try:
        consumer.assign([ConfluentTopicPartition("rf", 0, 0)])
        deadline = time.monotonic() + 30
        while len(values) < 1000 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.add(message.value())
    finally:
        consumer.close()
    assert values == {b"r%d" % i for i in range(1000)}

    for targets, error in (({0: [2, 9]}, "INVALID_REPLICA_ASSIGNMENT"),
                           ({0: [2, 2]}, "INVALID_REPLICA_ASSIGNMENT"),
                           ({0: []}, "INVALID_REPLICA_ASSIGNMENT"),
                           ({5: [1]}, "unknown partitions rf-5")):  # fmt: skip
        path = plan(tmp_path / "bad.json", targets, "rf")
        done = weir("reassign", "execute", "--reassignment-json-file", str(path),
                    "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode != 0 and error in done.stderr, (targets, done.stderr)
    listed = weir("reassign", "list", "--bootstrap-server", bootstrap)
    assert listed.returncode == 0 and "No partition reassignments found." in listed.stdout
    cancelled = weir("reassign", "cancel", "--reassignment-json-file", str(tmp_path / "bad.json"),
                     "--bootstrap-server", bootstrap)  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stderr
    view = metadata_of_all(brokers.values())[1].topics["rf"][0]
    assert sorted(view.replicas) == [2, 3], "a refused plan moved nothing"


@pytest.mark.slow
def test_a_move_survives_its_controller_and_its_old_leader_killed(
    zookeeper, cluster_brokers, zk_view, tmp_path, figure
):
    """Faults mid-move, under idempotent acks=all load, each move held open by pausing its new
    replica (SIGSTOP) so it cannot catch up: (1) the controller is killed -9, and its successor
    finishes the move once the new replica runs again; (2) the partition's leader, which is
    leaving, is killed -9, another in-sync replica leads, and the move completes without it.
    No acknowledged record is lost or written twice."""
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 4, config=CONFIG)
    controller = wait_settled(brokers.values())
    others = [n for n in sorted(brokers) if n != controller]
    x, y, z = others
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic("held", 2, replica_assignment=[[x, y], [x, y]],
                                  config={"min.insync.replicas": "2"}))  # fmt: skip
    del admin
    history = History()
    producer = ProducerWorker(0, bootstrap, "held", 2, 200.0, history)
    producer.start()

    def live() -> str:
        """The brokers that answer (not paused, not killed): clients that pick any broker
        (kafka-python's admin client does) would wait on a paused one."""
        return ",".join(b.bootstrap for n, b in brokers.items() if b.running() and n != z)

    def move(partition: int, replicas: list[int]) -> None:
        path = plan(tmp_path / f"move-{partition}.json", {partition: replicas}, "held")
        done = weir("reassign", "execute", "--reassignment-json-file", str(path),
                    "--bootstrap-server", live())  # fmt: skip
        assert done.returncode == 0, done.stderr

    def moving(partition: int) -> bool:
        done = weir("reassign", "list", "--bootstrap-server", live())
        assert done.returncode == 0, done.stderr
        return f"held-{partition}: replicas:" in done.stdout

    try:
        poll(lambda: len(history.acked) > 200, 60, "acknowledgements before the faults")
        # (1) the controller killed while partition 0 moves [x, y] -> [y, z]
        brokers[z].pause()
        move(0, [y, z])
        assert moving(0)
        brokers[controller].kill()
        _, took = timed_poll(lambda: zk_view.controller() not in (None, controller), 60,
                             "a new controller")  # fmt: skip
        figure("controller kill -9 -> successor", took)
        poll(lambda: moving(0), 30, "the move still under way on the new controller")
        brokers[z].resume()
        _, took = timed_poll(lambda: not moving(0), 90, "the move finished by the new controller")
        figure("new replica resumed -> move complete", took)
        brokers[controller].start()

        # (2) the leaving leader killed while partition 1 moves [x, y] -> [y, z]
        assert metadata_of_all([brokers[y]])[y].topics["held"][1].leader == x  # preferred
        brokers[z].pause()
        move(1, [y, z])
        assert moving(1)
        brokers[x].kill()
        brokers[z].resume()
        _, took = timed_poll(lambda: not moving(1), 90, "the move complete without its old leader")
        figure("leaving leader kill -9 -> move complete", took)
        brokers[x].start()
        acked = len(history.acked)
        poll(lambda: len(history.acked) > acked + 200, 60, "acknowledgements after the faults")
    finally:
        for broker in brokers.values():
            if broker.running():
                broker.resume()
        producer.stop()
        producer.join(90)
        close_client(producer)

    def moved() -> bool:
        """(A broker just back may not list the topic for a moment.)"""
        views = metadata_of_all([b for b in brokers.values() if b.running()]).values()
        shown = [v.topics.get("held", {}).get(p) for v in views for p in (0, 1)]
        return all(s is not None and sorted(s.replicas) == sorted([y, z]) for s in shown)

    poll(moved, 30, "both partitions on their target replicas everywhere")
    assert producer.unflushed == 0
    ends = read_everything(bootstrap, "held", 2, history)
    verdict = check(history, ends)
    errors = {"send": dict(history.send_errors), "client": dict(history.client_errors)}
    assert verdict.lost == [] and verdict.duplicated == [] and verdict.divergent == [], (
        verdict, errors)
    figure("records acknowledged", verdict.acked, "records")


@pytest.mark.slow
def test_a_drained_broker_holds_nothing_and_retires_with_nothing_lost(
    zookeeper, cluster_brokers, figure
):
    """`weir cluster drain --broker 4` under acks=all load: every replica on broker 4 (the
    group coordinator's topic's included) moves to the other three, its logs go, and once it
    is stopped the producer carries on; no acknowledged record is lost or written twice."""
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 4, config=CONFIG)
    wait_settled(brokers.values())
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic("drained", 8, 2, config={"min.insync.replicas": "2"}))
    del admin
    history = History()
    producer = ProducerWorker(0, bootstrap, "drained", 8, 200.0, history)
    producer.start()
    try:
        poll(lambda: len(history.acked) > 200, 60, "acknowledgements before the drain")
        held = [(t, p) for t, ps in metadata_of_all([brokers[1]])[1].topics.items()
                for p, view in ps.items() if 4 in view.replicas]  # fmt: skip
        assert held, "broker 4 holds some replicas to begin with"
        started = time.monotonic()
        done = weir("cluster", "drain", "--broker", "4", "--bootstrap-server", bootstrap)
        assert done.returncode == 0, done.stderr
        assert "Broker 4 holds no replicas now" in done.stdout
        figure(f"drain of {len(held)} replicas under load", time.monotonic() - started)
        views = metadata_of_all(brokers.values()).values()
        assert not [(t, p) for v in views for t, ps in v.topics.items()
                    for p, view in ps.items() if 4 in view.replicas]  # fmt: skip
        poll(lambda: not [d for d in brokers[4].data_dir.iterdir()
                          if d.is_dir() and d.name.startswith("drained-")], 30,
             "broker 4's logs deleted")  # fmt: skip
        assert brokers[4].stop() == 0
        acked = len(history.acked)
        poll(lambda: len(history.acked) > acked + 200, 60, "acknowledgements without broker 4")
    finally:
        producer.stop()
        producer.join(90)
        close_client(producer)
    ends = read_everything(",".join(b.bootstrap for b in brokers.values() if b.running()),
                           "drained", 8, history)  # fmt: skip
    verdict = check(history, ends)
    errors = {"send": dict(history.send_errors), "client": dict(history.client_errors)}
    assert verdict.lost == [] and verdict.duplicated == [] and verdict.divergent == [], (
        verdict, errors)


@pytest.mark.slow
def test_a_new_broker_takes_its_share_and_a_move_survives_its_target_killed(
    zookeeper, cluster_brokers, tmp_path, figure
):
    """A fourth broker joins three under acks=all load and starts empty; `weir reassign
    generate --broker-list 1,2,3,4` proposes a plan giving it its share, `execute --throttle`
    runs it and `verify` sees it done. Then a move's new replica is killed -9 mid-move (held
    open by SIGSTOP first): the move waits, and completes once the broker is back; another move
    whose target is down is cancelled, back to its original replicas; a replica moved off the
    broker while it is down has its log deleted when it starts again. Nothing acknowledged is
    lost or written twice."""
    zk = f"{zookeeper.connect}{CHROOT}"
    brokers = cluster_brokers.start_cluster(zk, 3, config=CONFIG)
    wait_settled(brokers.values())
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic("grown", 6, 2, config={"min.insync.replicas": "2"}))
    del admin
    history = History()
    producer = ProducerWorker(0, bootstrap, "grown", 6, 200.0, history)
    producer.start()
    try:
        poll(lambda: len(history.acked) > 200, 60, "acknowledgements before the new broker")
        brokers[4] = cluster_brokers.add(4, zk, config=CONFIG)
        brokers[4].start()
        wait_settled(brokers.values())
        assert not [d for d in brokers[4].data_dir.iterdir() if d.name.startswith("grown-")]
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "grown"}]}))
        proposed = weir("reassign", "generate", "--topics-to-move-json-file", str(topics),
                        "--broker-list", "1,2,3,4", "--bootstrap-server", bootstrap)  # fmt: skip
        assert proposed.returncode == 0, proposed.stderr
        assert "Proposed partition reassignment configuration" in proposed.stdout
        share = tmp_path / "share.json"
        share.write_text(proposed.stdout.strip().splitlines()[-1])
        entries = json.loads(share.read_text())["partitions"]
        target = {p["partition"]: p["replicas"] for p in entries}
        share_of_4 = sum(4 in r for r in target.values())
        assert share_of_4 >= 2, target  # about a quarter of 12 replicas
        started = time.monotonic()
        done = weir("reassign", "execute", "--reassignment-json-file", str(share),
                    "--throttle", "50000000", "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

        def verified(path: Path) -> bool:
            """(The moves after the first set no throttle: nothing to clear on a dead broker.)"""
            keep = [] if path == share else ["--preserve-throttles"]
            answer = weir("reassign", "verify", "--reassignment-json-file", str(path),
                          "--bootstrap-server", live(), *keep)  # fmt: skip
            assert answer.returncode == 0, answer.stdout + answer.stderr
            return "still in progress" not in answer.stdout

        def live() -> str:
            return ",".join(b.bootstrap for b in brokers.values() if b.running())

        poll(lambda: verified(share), 90, "the new broker's share moved")
        figure(f"a new broker's share ({share_of_4} replicas) moved under load",
               time.monotonic() - started)
        held = sorted(d.name for d in brokers[4].data_dir.iterdir() if d.name.startswith("grown-"))
        assert held == sorted(f"grown-{p}" for p, r in target.items() if 4 in r)

        # a move whose new replica is killed -9 mid-move completes once it is back
        current = metadata_of_all([brokers[1]])[1].topics["grown"]
        index = next(p for p, view in current.items() if 4 not in view.replicas)
        moved_to = [4, *[r for r in current[index].replicas][1:]]
        brokers[4].pause()
        path = plan(tmp_path / "killed.json", {index: moved_to}, "grown")
        done = weir("reassign", "execute", "--reassignment-json-file", str(path),
                    "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode == 0, done.stderr
        brokers[4].kill()
        time.sleep(2)
        assert not verified(path), "the move waits for its new replica"
        brokers[4].start()
        _, took = timed_poll(lambda: verified(path), 90, "the move complete after the restart")
        figure("target replica kill -9 -> restarted -> move complete", took)

        # a move whose target is down is cancelled back to the original replicas
        current = metadata_of_all([brokers[1]])[1].topics["grown"]
        index = next(p for p, view in current.items() if 4 not in view.replicas)
        original = list(current[index].replicas)
        brokers[4].pause()  # still registered, so the move is accepted; then it dies
        path = plan(tmp_path / "cancelled.json", {index: [4, *original[1:]]}, "grown")
        done = weir("reassign", "execute", "--reassignment-json-file", str(path),
                    "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode == 0, done.stderr
        brokers[4].kill()
        cancelled = weir("reassign", "cancel", "--reassignment-json-file", str(path),
                         "--bootstrap-server", bootstrap)  # fmt: skip
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"Successfully cancelled partition reassignments for: grown-{index}" in (
            cancelled.stdout)

        def reverted() -> bool:
            view = metadata_of_all([brokers[1]])[1].topics.get("grown", {}).get(index)
            # (in the order Kafka leaves them too: the cancelled target's first)
            return view is not None and sorted(view.replicas) == sorted(original)

        poll(reverted, 30, "the cancelled move back on its original replicas")

        # a replica moved off broker 4 while it is down: its log goes when 4 starts again
        current = metadata_of_all([brokers[1]])[1].topics["grown"]
        index = next(p for p, view in current.items() if 4 in view.replicas)
        away = [r for r in current[index].replicas if r != 4]
        away.append(next(b for b in (1, 2, 3) if b not in away))
        path = plan(tmp_path / "away.json", {index: away}, "grown")
        done = weir("reassign", "execute", "--reassignment-json-file", str(path),
                    "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode == 0, done.stderr
        poll(lambda: verified(path), 60, "the move off the dead broker complete")
        stray = brokers[4].data_dir / f"grown-{index}"
        assert stray.exists(), "its log is still there while it is down"
        brokers[4].start()
        poll(lambda: not stray.exists(), 30, "the moved-away replica's log deleted at start")
        acked = len(history.acked)
        poll(lambda: len(history.acked) > acked + 200, 60, "acknowledgements after the moves")
    finally:
        for broker in brokers.values():
            if broker.running():
                broker.resume()
        producer.stop()
        producer.join(90)
        close_client(producer)
    assert producer.unflushed == 0
    ends = read_everything(bootstrap, "grown", 6, history)
    verdict = check(history, ends)
    errors = {"send": dict(history.send_errors), "client": dict(history.client_errors)}
    assert verdict.lost == [] and verdict.duplicated == [] and verdict.divergent == [], (
        verdict, errors)
    figure("records acknowledged", verdict.acked, "records")
