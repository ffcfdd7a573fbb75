"""Carrying a plan out through the public reassignment API, a few moves at a time.

Moves that only change a partition's leader go first (they copy nothing), then the others from
the smallest copy up. At most `max_concurrent` moves are under way at once; each time one ends,
the next starts, so one slow move holds up no other. A move whose new replicas include a broker
that has left the cluster is cancelled (the partition keeps its old replicas); one not started
yet is dropped. With a throttle, the moving replicas copy at that rate
(`leader/follower.replication.throttled.*`, as `weir reassign execute --throttle`), made to
follow the brokers' load when their metrics are given (`governor`), and the throttles are
removed when the plan ends. Once the moves are done, each moved partition's first
replica is elected its leader.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import ElectionType, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from weir.cli.cluster_requests import elect_leaders
from weir.cli.reassign import Cluster
from weir.cli.reassign_throttle import (
    BROKER,
    FOLLOWER_RATE,
    LEADER_RATE,
    SET,
    Change,
    apply_throttle,
    clear_throttles,
    throttle_plan,
)
from weir.ops.operator.governor import ADAPT_EVERY_S, ThrottleGovernor
from weir.ops.operator.load import TopicPartition
from weir.ops.operator.planner import Move

POLL_S = 0.5
DEFAULT_MAX_CONCURRENT = 5


def name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


@dataclass
class Outcome:
    done: list[TopicPartition] = field(default_factory=list)
    #: moves cancelled or not started, and why
    cancelled: dict[TopicPartition, str] = field(default_factory=dict)
    refused: dict[TopicPartition, str] = field(default_factory=dict)
    leaders_elected: int = 0
    election_failures: list[str] = field(default_factory=list)
    #: the run was told to stop: the moves under way were left running
    stopped: bool = False

    @property
    def clean(self) -> bool:
        return not (self.cancelled or self.refused or self.election_failures)


class Executor:
    """Runs `moves` on `cluster`; `report` gets a line as each move starts and ends."""

    def __init__(
        self,
        cluster: Cluster,
        moves: list[Move],
        *,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        throttle: int | None = None,
        timeout_s: float = 600.0,
        admin: Callable[[], AdminClient] | None = None,
        report: Callable[[str], None] = print,
        adopted: Sequence[Move] = (),
        should_stop: Callable[[], bool] = lambda: False,
        on_change: Callable[[list[Move], list[Move]], None] | None = None,
        idle_of: Callable[[set[int]], list[float]] | None = None,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"at most {max_concurrent} moves at once: it must be 1 or more")
        if throttle is not None and throttle <= 0:
            raise ValueError(f"a throttle of {throttle} B/s: it must be 1 or more")
        self.cluster = cluster
        self.pending = deque(sorted(moves, key=lambda m: (not m.leader_only, m.copy_bytes,
                                                          m.partition)))  # fmt: skip
        self.moves = {m.partition: m for m in moves}
        self.max_concurrent = max_concurrent
        self.throttle = throttle
        self.timeout_s = timeout_s
        self.admin = admin
        self.report = report
        self.moves |= {m.partition: m for m in adopted}
        self.running: dict[TopicPartition, float] = {m.partition: time.monotonic()
                                                     for m in adopted}  # fmt: skip
        self.outcome = Outcome()
        self.should_stop = should_stop
        self.on_change = on_change
        #: with `idle_of` (the handler idle ratios of brokers), the throttle follows their load
        self.governor = ThrottleGovernor(throttle) if throttle is not None and idle_of else None
        self.idle_of = idle_of
        self._adapted_at = time.monotonic()

    def run(self) -> Outcome:
        """Every move run to its end; when `should_stop` says so, returns at once with the
        moves under way left running and the throttles in place (`Outcome.stopped`)."""
        if not self.moves:
            return self.outcome
        if self.throttle is not None and self.pending:
            self._set_throttle()
        try:
            self._run_moves()
        finally:
            if self.throttle is not None and not self.outcome.stopped:
                topics = {tp[0] for tp in self.moves}
                brokers = {r for m in self.moves.values() for r in (*m.before, *m.after)}
                for error in clear_throttles(self.cluster, topics, brokers):
                    self.report(f"throttle not removed: {error}")
        if not self.outcome.stopped:
            self._elect()
        return self.outcome

    def _set_throttle(self) -> None:
        assert self.throttle is not None
        current = {tp: m.before for tp, m in self.moves.items()}
        targets = {tp: m.after for tp, m in self.moves.items()}
        errors = apply_throttle(self.cluster, throttle_plan(targets, current), self.throttle, None)
        if errors:
            raise RuntimeError("throttle not set, nothing moved: " + "; ".join(errors))

    def _run_moves(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while self.pending or self.running:
            if self.should_stop():
                self.outcome.stopped = True
                return
            self.cluster.refresh()
            live = set(self.cluster.brokers())
            self._cancel_touching_dead(live)
            self._start(live)
            if not self.running and not self.pending:
                break
            self._changed()
            time.sleep(POLL_S)
            self._finished()
            self._changed()
            self._adapt()
            if time.monotonic() > deadline:
                self._cancel(list(self.running), f"not done within {self.timeout_s:g}s")
                for move in self.pending:
                    self.outcome.cancelled[move.partition] = "not started before the timeout"
                self.pending.clear()
        self._changed()

    def _adapt(self) -> None:
        """Every ADAPT_EVERY_S, the throttle of the brokers the running moves touch set from
        how busy the busiest of them is (`governor`)."""
        if self.governor is None or self.idle_of is None or not self.running:
            return
        if time.monotonic() - self._adapted_at < ADAPT_EVERY_S:
            return
        self._adapted_at = time.monotonic()
        brokers = {r for tp in self.running for r in (*self.moves[tp].before,
                                                       *self.moves[tp].after)}  # fmt: skip
        idle = self.idle_of(brokers)
        before, rate = self.governor.rate, self.governor.next_rate(idle)
        if rate == before:
            return
        changes: list[Change] = [(LEADER_RATE, str(rate), SET), (FOLLOWER_RATE, str(rate), SET)]
        for broker in sorted(brokers):
            error = self.cluster.alter_configs(BROKER, str(broker), changes, broker)
            if error:
                self.report(f"throttle not changed on broker {broker}: {error}")
        self.report(f"throttle {before} -> {rate} B/s (busiest broker idle {min(idle):.0%})")

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change([self.moves[tp] for tp in self.running], list(self.pending))

    def _start(self, live: set[int]) -> None:
        batch: dict[TopicPartition, tuple[int, ...] | None] = {}
        while self.pending and len(self.running) + len(batch) < self.max_concurrent:
            move = self.pending.popleft()
            gone = sorted(set(move.after) - live)
            if gone:
                self.outcome.cancelled[move.partition] = f"brokers {gone} have left"
                continue
            batch[move.partition] = move.after
        if not batch:
            return
        for tp, (code, message) in self.cluster.alter(batch).items():
            if code is ErrorCode.none:
                self.running[tp] = time.monotonic()
                move = self.moves[tp]
                self.report(f"started {name(tp)}: {list(move.before)} -> {list(move.after)}")
            else:
                why = code.name.upper() + (f": {message}" if message else "")
                self.outcome.refused[tp] = why
                self.report(f"refused {name(tp)}: {why}")

    def _finished(self) -> None:
        ongoing = self.cluster.ongoing()
        for tp in [tp for tp in self.running if tp not in ongoing]:
            started = self.running.pop(tp)
            self.outcome.done.append(tp)
            self.report(f"done {name(tp)} in {time.monotonic() - started:.1f}s")

    def _cancel_touching_dead(self, live: set[int]) -> None:
        dead = [tp for tp in self.running if set(self.moves[tp].after) - live]
        if dead:
            self._cancel(dead, "a broker it was moving to has left")

    def _cancel(self, partitions: list[TopicPartition], why: str) -> None:
        if not partitions:
            return
        outcome = self.cluster.alter({tp: None for tp in partitions})
        for tp in partitions:
            self.running.pop(tp, None)
            code, _ = outcome.get(tp, (ErrorCode.none, None))
            finished = code is ErrorCode.no_reassignment_in_progress
            if finished:
                self.outcome.done.append(tp)
                continue
            self.outcome.cancelled[tp] = why
            self.report(f"cancelled {name(tp)}: {why}")

    def _elect(self) -> None:
        """The moved partitions' first replicas made their leaders."""
        self.cluster.refresh()
        leaders = self.cluster.leaders()
        wanted = [KafkaTopicPartition(tp[0], tp[1]) for tp in self.outcome.done
                  if leaders.get(tp) != self.moves[tp].after[0]]  # fmt: skip
        if not wanted or self.admin is None:
            return
        deadline = time.monotonic() + 30.0
        admin = self.admin()
        while wanted:
            try:
                election = elect_leaders(admin, ElectionType.PREFERRED, wanted)
            except KafkaException as exc:
                self.outcome.election_failures.append(str(exc.args[0]))
                return
            self.outcome.leaders_elected += len(election.elected)
            wanted = [tp for tp, _ in election.failed]
            if wanted and time.monotonic() > deadline:
                self.outcome.election_failures += [f"{tp.topic}-{tp.partition}: {e.str()}"
                                                   for tp, e in election.failed]  # fmt: skip
                return
            if wanted:
                time.sleep(POLL_S)
