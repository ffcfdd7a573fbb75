"""Faults during partition reassignment: rounds of one move each, held open mid-way, with one
fault landing on it, on faultkit's cluster (a real ZooKeeper, three brokers in network
namespaces) under its idempotent acks=all producers and consumer group, and its checker at the
end. Used by tests/cluster/test_reassignment_faults.py and bench/reassign_faults.py; it imports
no pytest.

A round picks a partition of the replication-factor-2 topic and a move of it: one of its two
replicas (`leaving`) is replaced by the broker that holds none (`adding`). The added broker is
paused (SIGSTOP) before `weir reassign execute`, so that it cannot catch up and the move stays
under way, then one fault, chosen from the seed:

- `kill_controller`: kill -9 of the controller; the move can only finish on its successor,
  which resumes it from the topic's znode (`adding_replicas` / `removing_replicas`);
- `kill_target`: kill -9 of the added replica while it is paused; it starts again on the same
  data once ZooKeeper forgot it, and the move finishes once it has caught up;
- `kill_old_leader`: kill -9 of the partition's leader, which is the replica leaving; another
  in-sync replica leads and the move finishes without it;
- `cancel`: `weir reassign cancel` while the added replica is paused; the partition goes back
  to its original replicas.

The fault is undone (the added replica resumed, a killed broker restarted), and the round waits,
bounded, until the move is settled (complete: the target replicas alone; cancelled: the original
ones), every broker registered and every ISR full. The paused broker is never the controller
(the moves are sent to the controller; a paused one would hold them) and is resumed within a
few seconds, before its ZooKeeper session or its followers' lag time runs out.

`weir reassign` runs as a child process with a bootstrap list of live, unpaused brokers only (a
client may send to any broker it is given).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faultkit as fk

MOVE_FAULT_KINDS = ("kill_controller", "kill_target", "kill_old_leader", "cancel")
REPLICATION_FACTOR = 2
#: how long one `weir reassign` command may take
COMMAND_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Move:
    partition: int
    original: tuple[int, ...]
    target: tuple[int, ...]
    adding: int  # the broker that gets a replica (paused to hold the move open)
    leaving: int  # the broker whose replica goes
    leader: int  # the partition's leader when the move was planned


@dataclass(slots=True)
class MoveRecord:
    round: int
    kind: str
    partition: int
    original: list[int]
    target: list[int]
    adding: int
    leaving: int
    fault_on: int | None  # the broker the fault hit (None for a cancel)
    fault_on_roles: list[str]
    started: bool = False  # execute accepted, the move seen under way before the fault
    execute_s: float = 0.0  # `weir reassign execute` until the move is seen under way
    settled: bool = False  # the move complete (or cancelled back) and every ISR full in time
    outcome: str = ""  # "moved", "cancelled back", or what was found instead
    move_s: float = 0.0  # execute -> settled
    recovery_s: float = 0.0  # fault -> settled
    leaderless_s: float = 0.0
    leaderless_partition_s: float = 0.0
    longest_ack_gap_s: float = 0.0
    note: str = ""


def weir_reassign(action: str, bootstrap: str, plan: Path | None = None) -> str:
    """`weir reassign ACTION` against `bootstrap`; its output. FaultKitError if it fails."""
    command = [sys.executable, "-m", "weir.cli.main", "reassign", action,
               "--bootstrap-server", bootstrap]  # fmt: skip
    if plan is not None:
        command += ["--reassignment-json-file", str(plan)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise fk.FaultKitError(f"weir reassign {action}: no answer in {exc.timeout:g}s") from exc
    if done.returncode != 0:
        raise fk.FaultKitError(f"weir reassign {action}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def write_plan(path: Path, topic: str, partition: int, replicas: tuple[int, ...]) -> Path:
    """A kafka-reassign-partitions.sh reassignment file moving one partition."""
    entry = {"topic": topic, "partition": partition, "replicas": list(replicas)}
    path.write_text(json.dumps({"version": 1, "partitions": [entry]}))
    return path


def live_bootstrap(cluster: fk.FaultCluster) -> str:
    """The brokers running, not paused and not cut off."""
    return ",".join(cluster.brokers[n].bootstrap for n in cluster.healthy())


# ---- choosing a move -----------------------------------------------------------------------------


def candidate_moves(
    cluster: fk.FaultCluster, topic: str, partitions: int, kind: str, controller: int
) -> list[Move]:
    """Every move of one replica to a broker without one, whose added broker is not the
    controller; for `kill_old_leader` only moves whose leaving replica leads."""
    moves = []
    for p in range(partitions):
        original = tuple(cluster.replicas(topic, p))
        leader = cluster.partition_state(topic, p).leader
        for adding in sorted(set(cluster.brokers) - set(original) - {controller}):
            for leaving in original:
                if kind == "kill_old_leader" and leaving != leader:
                    continue
                target = tuple(adding if r == leaving else r for r in original)
                moves.append(Move(p, original, target, adding, leaving, leader))
    return moves


def plan_move(
    cluster: fk.FaultCluster, topic: str, partitions: int, kind: str, rng: random.Random
) -> Move:
    """A move for a round of `kind`, at random among the candidates, preferring those that
    leave every broker some replica of the topic (so that whichever broker is the controller,
    a partition without it can be moved) and whose fault hits one role only (the leaving
    leader killed is not the controller too)."""
    controller = cluster.wait_controller()
    moves = candidate_moves(cluster, topic, partitions, kind, controller)
    if not moves:
        raise fk.FaultKitError(f"no move for {kind}: the controller {controller} holds nothing")
    held = Counter(r for p in range(partitions) for r in cluster.replicas(topic, p))

    def spread(m: Move) -> bool:
        return held[m.leaving] > 1

    def single_role(m: Move) -> bool:
        return not (kind == "kill_old_leader" and m.leaving == controller)

    for wanted in (lambda m: spread(m) and single_role(m), spread, lambda m: True):
        chosen = [m for m in moves if wanted(m)]
        if chosen:
            return rng.choice(chosen)
    raise AssertionError("unreachable")


# ---- one round -----------------------------------------------------------------------------------


def moving(cluster: fk.FaultCluster, topic: str, partition: int) -> bool:
    return partition in cluster.moves(topic)


def settled_on(
    cluster: fk.FaultCluster, topic: str, partitions: int, partition: int, replicas: tuple[int, ...]
) -> bool:
    """The move of `partition` over and it on `replicas` alone, every broker registered, every
    partition's ISR full."""
    return (
        not moving(cluster, topic, partition)
        and set(cluster.replicas(topic, partition)) == set(replicas)
        and cluster.registered() == set(cluster.brokers)
        and cluster.isr_full(topic, partitions)
    )


def start_move(cluster: fk.FaultCluster, topic: str, move: Move, plan: Path) -> float:
    """Pause the added broker and start the move; the seconds until it is seen under way.
    FaultKitError if it is not."""
    cluster.pause(move.adding)
    started = time.monotonic()
    weir_reassign("execute", live_bootstrap(cluster), plan)
    fk.poll(lambda: moving(cluster, topic, move.partition), 10, f"p{move.partition} moving")
    return time.monotonic() - started


def start_move_again(
    cluster: fk.FaultCluster,
    topic: str,
    partitions: int,
    move: Move,
    plan: Path,
    settle_timeout: float,
    log: Callable[[str], None],
) -> float:
    """`start_move`, and once more if it failed without starting the move (on a loaded
    machine `weir reassign execute` can take longer than the added broker's ZooKeeper session
    lasts while it is paused, and the controller then refuses it as not registered)."""
    try:
        return start_move(cluster, topic, move, plan)
    except fk.FaultKitError as exc:
        if moving(cluster, topic, move.partition):
            raise
        log(f"  not started ({exc}); once more when all are back")
    cluster.undo_faults()
    fk.poll(lambda: settled_on(cluster, topic, partitions, move.partition, move.original),
            settle_timeout, "every broker back and every ISR full")  # fmt: skip
    return start_move(cluster, topic, move, plan)


def inject(
    cluster: fk.FaultCluster,
    kind: str,
    topic: str,
    move: Move,
    plan: Path,
    rng: random.Random,
    log: Callable[[str], None],
) -> None:
    """The fault of `kind` mid-move, then undone: the added broker resumed (or restarted) and
    a killed broker restarted on the same data."""
    if kind == "kill_controller":
        controller = cluster.wait_controller()
        cluster.kill(controller)
        time.sleep(rng.uniform(0.0, 1.0))
        cluster.resume(move.adding)  # the move cannot complete before a successor takes over
        fk.poll(lambda: cluster.controller() not in (None, controller), 60, "a new controller")
        successor = cluster.controller()
        log(f"  controller {controller} killed; broker {successor} took over, move under way: "
            f"{moving(cluster, topic, move.partition)}")  # fmt: skip
        cluster.restart(controller)
    elif kind == "kill_target":
        cluster.kill(move.adding)
        time.sleep(rng.uniform(0.0, 2.0))
        cluster.restart(move.adding)
    elif kind == "kill_old_leader":
        cluster.kill(move.leaving)
        time.sleep(rng.uniform(0.0, 1.0))
        cluster.resume(move.adding)
        cluster.restart(move.leaving)
    elif kind == "cancel":
        weir_reassign("cancel", live_bootstrap(cluster), plan)
        time.sleep(rng.uniform(0.0, 1.0))
        cluster.resume(move.adding)
    else:
        raise ValueError(kind)


def fault_on(cluster: fk.FaultCluster, kind: str, move: Move) -> int | None:
    if kind == "kill_controller":
        return cluster.wait_controller()
    return {"kill_target": move.adding, "kill_old_leader": move.leaving}.get(kind)


def run_move_round(
    number: int,
    kind: str,
    cluster: fk.FaultCluster,
    workload: fk.Workload,
    monitor: fk.AvailabilityMonitor,
    rng: random.Random,
    plans: Path,
    *,
    settle_timeout: float,
    log: Callable[[str], None] = print,
) -> MoveRecord:
    topic, partitions = workload.topic, workload.partitions
    move = plan_move(cluster, topic, partitions, kind, rng)
    target = fault_on(cluster, kind, move)
    roles = [] if target is None else fk.roles(cluster, topic, partitions, target)
    record = MoveRecord(number, kind, move.partition, list(move.original), list(move.target),
                        move.adding, move.leaving, target, roles)  # fmt: skip
    log(f"round {number}: {kind}; p{move.partition} {list(move.original)} -> "
        f"{list(move.target)} (leader {move.leader}); fault on {target} {roles}")  # fmt: skip
    plan = write_plan(plans / f"round-{number}.json", topic, move.partition, move.target)
    expected = move.original if kind == "cancel" else move.target
    started = time.monotonic()
    fault_at = started
    try:
        record.execute_s = round(start_move_again(cluster, topic, partitions, move, plan,
                                                  settle_timeout, log), 2)  # fmt: skip
        record.started = True
        log(f"  under way {record.execute_s}s after execute")
        time.sleep(rng.uniform(0.2, 1.0))
        fault_at = time.monotonic()
        inject(cluster, kind, topic, move, plan, rng, log)
        fk.poll(lambda: settled_on(cluster, topic, partitions, move.partition, expected),
                settle_timeout, "the move settled and every ISR full", interval=0.25)  # fmt: skip
        record.settled = True
    except fk.FaultKitError as exc:
        record.note = str(exc)[:500]
        log(f"  not settled: {exc}")
        cluster.undo_faults()
    end = time.monotonic()
    record.outcome = describe(cluster, topic, move, kind)
    record.move_s, record.recovery_s = round(end - started, 2), round(end - fault_at, 2)
    any_s, partition_s = monitor.leaderless(started, end)
    record.leaderless_s, record.leaderless_partition_s = round(any_s, 2), round(partition_s, 2)
    record.longest_ack_gap_s = round(fk.longest_ack_gap(workload.history, started, end,
                                                        partitions), 2)  # fmt: skip
    log(f"  {record.outcome}; settled={record.settled} in {record.move_s}s "
        f"({record.recovery_s}s after the fault), leaderless {record.leaderless_s}s, "
        f"longest ack gap {record.longest_ack_gap_s}s")  # fmt: skip
    return record


def describe(cluster: fk.FaultCluster, topic: str, move: Move, kind: str) -> str:
    """Where the partition stands now: "moved", "cancelled back", or what it is on."""
    try:
        replicas = set(cluster.replicas(topic, move.partition))
        still = moving(cluster, topic, move.partition)
    except fk.UNSETTLED as exc:
        return f"unknown ({exc!r})"
    if not still and replicas == set(move.target) and kind != "cancel":
        return "moved"
    if not still and replicas == set(move.original) and kind == "cancel":
        return "cancelled back"
    return f"{'still moving' if still else 'not moving'} on {sorted(replicas)}"


# ---- a run ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class MoveOutcome:
    seed: int
    min_insync_replicas: int
    records: list[MoveRecord]
    verdict: fk.Verdict
    history: fk.History
    ends: dict[int, int]
    unflushed: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.history.fatal


def run_move_faults(
    cluster: fk.FaultCluster,
    topic: str,
    plans: Path,
    *,
    rounds: int,
    seed: int,
    partitions: int = 3,
    min_insync_replicas: int = 2,
    producers: int = 2,
    consumers: int = 2,
    rate: float = 100.0,
    settle_timeout: float = 90.0,
    kinds: tuple[str, ...] = MOVE_FAULT_KINDS,
    warmup_s: float = 3.0,
    log: Callable[[str], None] = print,
) -> MoveOutcome:
    """Create `topic` (replication factor 2), run the workload through `rounds` moves with a
    fault each (reassignment files go to `plans`), stop the writers, read everything back and
    check it."""
    started = time.monotonic()
    log(f"move fault seed {seed}")
    rng = random.Random(seed)
    cluster.create_topic(topic, partitions, REPLICATION_FACTOR,
                         {"min.insync.replicas": str(min_insync_replicas)})  # fmt: skip
    plans.mkdir(parents=True, exist_ok=True)
    workload = fk.Workload(cluster.bootstrap, topic, partitions, producers=producers,
                           consumers=consumers, rate=rate)  # fmt: skip
    monitor = fk.AvailabilityMonitor(cluster, topic, partitions)
    for thread in (*workload.producers, *workload.readers, monitor):
        cluster.track(thread)
    workload.start()
    monitor.start()
    records: list[MoveRecord] = []
    try:
        time.sleep(warmup_s)
        for number, kind in enumerate(fk.fault_plan(rounds, rng, kinds), 1):
            records.append(run_move_round(number, kind, cluster, workload, monitor, rng, plans,
                                          settle_timeout=settle_timeout, log=log))  # fmt: skip
            time.sleep(rng.uniform(0.5, 2.0))
    finally:
        unflushed = workload.stop_producers()
        workload.wait_group_caught_up(30)
        workload.stop_readers()
        monitor.stop()
    ends = fk.read_everything(cluster.bootstrap, topic, partitions, workload.history)
    verdict = fk.check(workload.history, ends)
    return MoveOutcome(seed, min_insync_replicas, records, verdict, workload.history, ends,
                       unflushed, round(time.monotonic() - started, 1))  # fmt: skip


def _by_kind(records: list[MoveRecord]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for kind in sorted({r.kind for r in records}):
        mine = [r for r in records if r.kind == kind]
        rows[kind] = {
            "rounds": len(mine),
            "settled": sum(r.settled for r in mine),
            "move_s_mean": round(sum(r.move_s for r in mine) / len(mine), 2),
            "move_s_max": round(max(r.move_s for r in mine), 2),
            "recovery_s_mean": round(sum(r.recovery_s for r in mine) / len(mine), 2),
            "leaderless_s_total": round(sum(r.leaderless_s for r in mine), 2),
            "longest_ack_gap_s_max": round(max(r.longest_ack_gap_s for r in mine), 2),
        }
    return rows


def move_summary(outcome: MoveOutcome) -> dict[str, Any]:
    """The figures of a run, for the table and the JSON."""
    counts = outcome.verdict.counts()
    return {
        "seed": outcome.seed,
        "min_insync_replicas": outcome.min_insync_replicas,
        "rounds": len(outcome.records),
        "faults": dict(Counter(r.kind for r in outcome.records)),
        "not_settled": sum(not r.settled for r in outcome.records),
        **{name: counts[name] for name in ("acked", "lost", "duplicated", "divergent", "gaps",
                                            "disorder", "unacked_read", "group_missing")},
        "sent": outcome.history.sent,
        "unflushed": outcome.unflushed,
        "fatal_producer_errors": list(outcome.history.fatal),
        "send_errors": dict(outcome.history.send_errors),
        "by_kind": _by_kind(outcome.records),
        "seconds": outcome.seconds,
    }  # fmt: skip


def move_table(figures: dict[str, Any]) -> str:
    """The run as text: totals, then one line per fault kind."""
    lines = [
        f"seed {figures['seed']}  min.insync.replicas {figures['min_insync_replicas']}  rounds "
        f"{figures['rounds']}  acked {figures['acked']} (sent {figures['sent']})  lost "
        f"{figures['lost']}  duplicated {figures['duplicated']}  divergent "
        f"{figures['divergent']}  gaps {figures['gaps']}  disorder {figures['disorder']}  "
        f"({figures['seconds']}s)",
        f"{'fault mid-move':<17}{'count':>6}{'settled':>8}{'move s':>8}{'max s':>8}"
        f"{'after fault s':>15}{'leaderless s':>14}{'ack gap max':>13}",
    ]
    for kind, row in figures["by_kind"].items():
        lines.append(
            f"{kind:<17}{row['rounds']:>6}{row['settled']:>8}{row['move_s_mean']:>8.2f}"
            f"{row['move_s_max']:>8.2f}{row['recovery_s_mean']:>15.2f}"
            f"{row['leaderless_s_total']:>14.2f}{row['longest_ack_gap_s_max']:>13.2f}"
        )
    return "\n".join(lines)
