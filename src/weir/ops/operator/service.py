"""`weir operator start`: the operator as a service, one active instance at a time.

Instances contend for leadership through a ZooKeeper lock (`/weir/operator/leader`, kazoo's
recipe: the holder's znode is ephemeral, so a dead instance's lock goes with its session). The
active one keeps its state in `/weir/operator/state` (JSON): when each dead broker was first
seen dead, and the moves it has under way with the throttle they copy at. Each write names the
znode version it read, so an instance that lost the lock without noticing cannot write over its
successor. An instance that takes over first follows the moves its predecessor left under way to
their end (cancelling them after the move timeout), removes their throttles, then goes on.

Each round (`interval`):
1. the brokers named in some assignment but not registered are dead since the first round that
   saw them so; those dead for longer than `heal_after` are healed: each of their replicas is
   re-created on a live broker (the planner's choice: its topic's pool, as many racks as before,
   the most even load);
2. one window of every live broker's load is measured and kept with the last `windows` windows;
3. when there is something to heal, or the largest broker's bytes in (or out) is more than
   `balance_threshold` times the smallest's, the plan is carried out (`executor`).

A broker that comes back is a live broker with less load than the others: the next rounds give
it its share, leaders included. Leadership is lost when the ZooKeeper connection is suspended or
lost; the moves under way are then left to the next leader. A stop (SIGTERM, SIGINT) does the
same: it starts nothing new and leaves what runs to the next instance.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, LockTimeout, NoNodeError

from weir.cli.reassign import Cluster
from weir.cluster.zookeeper import ZooKeeperAddress
from weir.ops.operator.executor import Executor
from weir.ops.operator.load import LoadError, LoadHistory
from weir.ops.operator.planner import Move, Plan, PlanError, spread
from weir.ops.operator.survey import cluster_state, idle_reader, measure

log = logging.getLogger(__name__)

OPERATOR_ROOT = "/weir/operator"
LEADER_PATH = OPERATOR_ROOT + "/leader"
STATE_PATH = OPERATOR_ROOT + "/state"
LOCK_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    interval_s: float = 60.0
    window_s: float = 10.0
    windows: int = 3
    #: balance when the largest broker's bytes in or out exceeds this many times the smallest's
    balance_threshold: float = 1.25
    #: how long a broker must be dead before its replicas are re-created elsewhere
    heal_after_s: float = 300.0
    max_concurrent: int = 5
    max_moves: int = 50
    throttle: int | None = None
    move_timeout_s: float = 600.0
    #: the throttle follows the brokers' load (`governor`)
    adaptive_throttle: bool = False

    def check(self) -> None:
        problems = []
        if self.interval_s <= 0 or self.window_s <= 0:
            problems.append("the interval and the window must be longer than 0 s")
        if self.windows < 1:
            problems.append(f"windows must be 1 or more, not {self.windows}")
        if self.balance_threshold < 1:
            problems.append(f"the balance threshold is a ratio of 1 or more, not "
                            f"{self.balance_threshold:g}")  # fmt: skip
        if self.heal_after_s < 0:
            problems.append(f"heal-after must be 0 s or more, not {self.heal_after_s:g}")
        if self.max_concurrent < 1 or self.max_moves < 1:
            problems.append("the moves at once and the most moves must be 1 or more")
        if self.throttle is not None and self.throttle <= 0:
            problems.append(f"a throttle must be a positive rate, not {self.throttle}")
        if self.adaptive_throttle and self.throttle is None:
            problems.append("an adaptive throttle needs a throttle to start from")
        if problems:
            raise ValueError("; ".join(problems))


def move_document(move: Move) -> dict[str, Any]:
    return {"topic": move.partition[0], "partition": move.partition[1],
            "before": list(move.before), "after": list(move.after)}  # fmt: skip


def move_of(document: dict[str, Any]) -> Move:
    return Move((str(document["topic"]), int(document["partition"])),
                tuple(int(r) for r in document["before"]),
                tuple(int(r) for r in document["after"]), 0.0)  # fmt: skip


class OperatorService:
    """One instance; `run(stop)` contends for leadership and leads until `stop` is set."""

    def __init__(
        self,
        zookeeper: str,
        cluster: Cluster,
        settings: ServiceSettings,
        *,
        identifier: str,
        admin: Callable[[], Any] | None = None,
        report: Callable[[str], None] = print,
        session_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings.check()
        address = ZooKeeperAddress.parse(zookeeper)
        self.client = KazooClient(hosts=address.hosts + address.chroot, timeout=session_timeout_s,
                                  connection_retry={"max_tries": -1, "delay": 0.2,
                                                    "max_delay": 2.0})  # fmt: skip
        self.cluster = cluster
        self.settings = settings
        self.identifier = identifier
        self.admin = admin
        self.report = report
        self.clock = clock
        self.leading = threading.Event()
        self._version = -1
        self._state: dict[str, Any] = {}
        self._written = ""
        self.client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state != KazooState.CONNECTED and self.leading.is_set():
            self.leading.clear()
            log.warning("ZooKeeper connection %s: no longer leading", state.lower())

    def run(self, stop: threading.Event) -> None:
        self.client.start()
        try:
            self.client.ensure_path(OPERATOR_ROOT)
            lock = self.client.Lock(LEADER_PATH, self.identifier)
            while not stop.is_set():
                try:
                    if not lock.acquire(timeout=LOCK_WAIT_S):
                        continue
                except LockTimeout:
                    continue
                self.leading.set()
                try:
                    self.report(f"operator {self.identifier}: leading")
                    self._lead(stop)
                except KazooException as exc:
                    log.warning("leadership ended: ZooKeeper: %r", exc)
                finally:
                    self.leading.clear()
                    self.report(f"operator {self.identifier}: no longer leading")
                    if self.client.connected:
                        lock.release()
        finally:
            self.client.stop()
            self.client.close()

    def _still_leading(self, stop: threading.Event) -> bool:
        return self.leading.is_set() and not stop.is_set()

    # ---- leading -------------------------------------------------------------------------------

    def _lead(self, stop: threading.Event) -> None:
        self._read_state()
        adopted = [move_of(d) for d in self._state.get("running", [])]
        if adopted:
            names = ", ".join(f"{m.partition[0]}-{m.partition[1]}" for m in adopted)
            self.report(f"following {len(adopted)} moves left under way: {names}")
            throttle = self._state.get("throttle")
            if not self._execute([], stop, adopted, throttle):
                return
        history = LoadHistory(self.settings.windows)
        while self._still_leading(stop):
            try:
                self._round(history, stop)
            except (LoadError, PlanError) as exc:
                self.report(f"round skipped: {exc}")
            except SystemExit as exc:
                self.report(f"round skipped: {exc}")
            stop.wait(self.settings.interval_s)

    def _round(self, history: LoadHistory, stop: threading.Event) -> None:
        state = cluster_state(self.cluster)
        live = {b.node_id for b in state.brokers}
        named = {r for replicas in state.assignment.values() for r in replicas}
        now = self.clock()
        dead_since = {int(b): t for b, t in self._state.get("dead_since", {}).items()
                      if int(b) in named - live}  # fmt: skip
        for broker in sorted(named - live - dead_since.keys()):
            self.report(f"broker {broker} is dead")
            dead_since[broker] = now
        self._save(dead_since=dead_since)
        heal = {b for b, since in dead_since.items() if now - since >= self.settings.heal_after_s}
        history.add(measure(state.metrics, self.settings.window_s, 1).median())
        if not self._still_leading(stop):
            return
        plan = state.planner(history).plan(self.settings.max_moves, heal=heal)
        for tp in plan.unhealed:
            self.report(f"cannot heal {tp[0]}-{tp[1]}: no live broker of its pool can take it")
        healing = [m for m in plan.moves if set(m.before) & heal]
        if not plan.moves or not (healing or self._unbalanced(plan)):
            return
        why = (f"healing brokers {sorted(heal)}" if healing
               else f"bytes in/out spread above {self.settings.balance_threshold:g}")  # fmt: skip
        self.report(f"{why}: {len(plan.moves)} moves, imbalance {plan.imbalance_before:.3f} -> "
                    f"{plan.imbalance_after:.3f}")  # fmt: skip
        self._execute(plan.moves, stop, [], self.settings.throttle, state.metrics)

    def _unbalanced(self, plan: Plan) -> bool:
        """Whether some pool's largest broker bytes in or out is over the threshold times its
        smallest's."""
        return any(spread(plan.before, name, plan.pools) > self.settings.balance_threshold
                   for name in ("bytes_in", "bytes_out"))  # fmt: skip

    def _execute(
        self, moves: list[Move], stop: threading.Event, adopted: list[Move], throttle: int | None,
        metrics: dict[int, str] | None = None,
    ) -> bool:  # fmt: skip
        """Run `moves` (and follow `adopted`); False if leadership ended on the way."""
        self._save(throttle=throttle)

        def changed(running: list[Move], pending: list[Move]) -> None:
            self._save(running=[move_document(m) for m in running])

        outcome = Executor(
            self.cluster, moves, max_concurrent=self.settings.max_concurrent, throttle=throttle,
            timeout_s=self.settings.move_timeout_s, admin=self.admin, report=self.report,
            adopted=adopted, should_stop=lambda: not self._still_leading(stop),
            on_change=changed, idle_of=idle_reader(metrics)
            if metrics and self.settings.adaptive_throttle else None,
        ).run()  # fmt: skip
        if outcome.stopped:
            return False
        self._save(running=[], throttle=None)
        self.report(f"{len(outcome.done)} moves done, {len(outcome.cancelled)} cancelled, "
                    f"{len(outcome.refused)} refused")  # fmt: skip
        return True

    # ---- state ---------------------------------------------------------------------------------

    def _read_state(self) -> None:
        try:
            data, stat = self.client.get(STATE_PATH)
        except NoNodeError:
            self._state, self._version, self._written = {}, -1, ""
            return
        try:
            self._state = json.loads(data) if data else {}
        except ValueError:
            log.warning("%s is not JSON; starting from an empty state", STATE_PATH)
            self._state = {}
        self._version, self._written = stat.version, data.decode(errors="replace")

    def _save(self, **changes: Any) -> None:
        """The state with `changes`, written if it changed, fenced by the version read."""
        state = {**self._state, **changes, "leader": self.identifier}
        state["dead_since"] = {str(b): t for b, t in state.get("dead_since", {}).items()}
        text = json.dumps(state, sort_keys=True)
        if text == self._written:
            return
        try:
            if self._version < 0:
                self.client.create(STATE_PATH, text.encode(), makepath=True)
                self._version = 0
            else:
                self._version = self.client.set(STATE_PATH, text.encode(), self._version).version
        except BadVersionError:
            self.leading.clear()
            self.report(f"operator {self.identifier}: another instance wrote the state; "
                        "no longer leading")  # fmt: skip
            return
        self._state, self._written = state, text
