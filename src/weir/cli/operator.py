"""`weir operator`: balance a cluster by the load its brokers measure (`weir.ops.operator`).

- `plan` measures every partition's traffic for `--windows` windows of `--window-seconds`
  (one metrics request per broker per window; every broker needs `metrics.port`), plans moves
  of replicas and leaders that even the brokers' load out, and prints each broker's load now
  and as planned, and the moves. `--output-json F` writes the moves as a reassignment file that
  `weir reassign execute` takes. Nothing is changed.
- `balance` plans the same way and carries the plan out: at most `--max-concurrent-moves` at
  once, each started as another ends, copying at `--throttle` B/s if given; then the moved
  partitions' first replicas are elected leaders. `--dry-run` prints the plan and stops.
- `pool move-broker N --to POOL` empties broker N within its pool (`weir.ops.operator.pools`),
  then sets its `broker.pool` to POOL (`--to ""`: no pool).
- `start --zookeeper HOST:PORT[/chroot]` runs the operator as a service (`weir.ops.operator.
  service`): one active instance among those started, balancing each `--interval` and
  re-creating the replicas of brokers dead longer than `--heal-after`; SIGTERM or SIGINT stops
  it, leaving the moves under way to the next instance.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from weir.cli.clients import add_bootstrap, add_client_settings, admin_client
from weir.cli.reassign import BROKER_POOL, BROKER_RESOURCE, Cluster, plan_json
from weir.cli.reassign_throttle import SET
from weir.cli.table import print_table
from weir.ops.operator.executor import DEFAULT_MAX_CONCURRENT, Executor, Outcome, name
from weir.ops.operator.load import LoadError, LoadHistory
from weir.ops.operator.planner import DEFAULT_MAX_MOVES, BrokerLoad, Plan, PlanError, spread
from weir.ops.operator.pools import emptying_plan
from weir.ops.operator.service import OperatorService, ServiceSettings
from weir.ops.operator.survey import ClusterState, cluster_state, idle_reader, measure

DEFAULT_WINDOW_S = 10.0
DEFAULT_WINDOWS = 3


def register(commands: Any) -> None:
    operator = commands.add_parser(
        "operator", help="balance the cluster by measured load (plan, balance)"
    )
    sub = operator.add_subparsers(dest="operator_command", required=True, metavar="ACTION")
    plan = sub.add_parser("plan", help="measure the load and print a plan that evens it out")
    plan.add_argument("--output-json", type=Path, metavar="FILE",
                      help="write the moves as a reassignment file (weir reassign execute)")
    plan.set_defaults(run=run_plan)
    balance = sub.add_parser("balance", help="measure, plan and carry the plan out")
    balance.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    balance.set_defaults(run=run_balance)
    pool = sub.add_parser("pool", help="tenant pools: hand a broker to another pool")
    pool_sub = pool.add_subparsers(dest="pool_command", required=True, metavar="ACTION")
    move_broker = pool_sub.add_parser("move-broker", help="empty a broker, then change its pool")
    move_broker.add_argument("broker", type=int, metavar="N")
    move_broker.add_argument("--to", required=True, metavar="POOL",
                             help='the pool it joins ("": none)')
    move_broker.set_defaults(run=run_move_broker)
    start = sub.add_parser("start", help="run the operator as a service (balancing, healing)")
    start.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/chroot]",
                       help="the cluster's ZooKeeper: the instances' leadership and state")
    start.add_argument("--zookeeper-session-timeout-ms", type=int, default=10_000, metavar="MS",
                       help="after this long without an instance its successor takes over "
                       "(default 10000)")  # fmt: skip
    start.add_argument("--id", default=f"{socket.gethostname()}-{os.getpid()}",
                       help="this instance's name (default: host-pid)")
    start.add_argument("--interval", type=float, default=60.0, metavar="SECONDS",
                       help="time between rounds (default 60)")
    start.add_argument("--heal-after", type=float, default=300.0, metavar="SECONDS",
                       help="re-create a dead broker's replicas once it has been dead this long "
                       "(default 300)")  # fmt: skip
    start.add_argument("--balance-threshold", type=float, default=1.25, metavar="RATIO",
                       help="balance when the largest broker's bytes in or out is over this "
                       "many times the smallest's (default 1.25)")  # fmt: skip
    start.set_defaults(run=run_start)
    for parser in (balance, start, move_broker):
        parser.add_argument("--max-concurrent-moves", type=int, default=DEFAULT_MAX_CONCURRENT,
                            metavar="N", help=f"moves under way at once (default "
                            f"{DEFAULT_MAX_CONCURRENT})")  # fmt: skip
        parser.add_argument("--throttle", type=int, metavar="BYTES_PER_SECOND",
                            help="hold the moves' replication to this rate while they run")
        parser.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                            help="cancel the moves not done by then (default 600)")
        parser.add_argument("--adaptive-throttle", action="store_true",
                            help="let the throttle follow the brokers' load: halved while the "
                            "busiest is idle under 30%%, raised by half while over 60%% "
                            "(between an eighth and four times --throttle)")  # fmt: skip
    for parser in (plan, balance, start, move_broker):
        parser.add_argument("--window-seconds", type=float, default=DEFAULT_WINDOW_S,
                            metavar="S", help=f"each measuring window (default "
                            f"{DEFAULT_WINDOW_S:g})")  # fmt: skip
        parser.add_argument("--windows", type=int, default=DEFAULT_WINDOWS, metavar="N",
                            help="windows measured; each partition's median counts "
                            f"(default {DEFAULT_WINDOWS})")  # fmt: skip
        parser.add_argument("--max-moves", type=int, default=DEFAULT_MAX_MOVES, metavar="N",
                            help=f"partitions moved at most (default {DEFAULT_MAX_MOVES})")
        add_bootstrap(parser)
        add_client_settings(parser)


def make_plan(args: argparse.Namespace) -> tuple[Cluster, ClusterState, Plan]:
    cluster = Cluster(args)
    try:
        state = cluster_state(cluster)
        print(f"measuring {len(state.metrics)} brokers' load: {args.windows} windows of "
              f"{args.window_seconds:g}s", file=sys.stderr, flush=True)  # fmt: skip
        history = measure(state.metrics, args.window_seconds, args.windows)
        return cluster, state, state.planner(history).plan(args.max_moves)
    except (LoadError, PlanError) as exc:
        raise SystemExit(f"weir: {exc}") from None


def print_plan(plan: Plan) -> None:
    header = ["BROKER", "BYTES-IN/S", "BYTES-OUT/S", "DISK-BYTES", "REPLICAS", "LEADERS"]

    def cells(load: BrokerLoad) -> list[object]:
        return [f"{load.bytes_in:.0f}", f"{load.bytes_out:.0f}", f"{load.disk:.0f}",
                f"{load.replicas:.0f}", f"{load.leaders:.0f}"]  # fmt: skip

    print_table(header, [[b, *(f"{now} -> {then}" for now, then in zip(
        cells(plan.before[b]), cells(plan.after[b]), strict=True))]
        for b in sorted(plan.after)])  # fmt: skip
    print()
    several = len(set(plan.pools.values())) > 1
    print(f"bytes-in max/min across brokers{' of a pool (the widest)' if several else ''}: "
          f"{_ratio(spread(plan.before, 'bytes_in', plan.pools))} -> "
          f"{_ratio(spread(plan.after, 'bytes_in', plan.pools))}")  # fmt: skip
    print(f"imbalance: {plan.imbalance_before:.3f} -> {plan.imbalance_after:.3f}")
    if plan.skipped:
        print(f"left alone (moving already): {', '.join(map(name, plan.skipped))}")
    if not plan.moves:
        print("no move lowers the imbalance: nothing to do")
        return
    print()
    print_table(["PARTITION", "REPLICAS", "PLANNED", "COPY-BYTES"], [
        [name(m.partition), ",".join(map(str, m.before)), ",".join(map(str, m.after)),
         f"{m.copy_bytes:.0f}"] for m in plan.moves])  # fmt: skip


def _ratio(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.2f}"


def run_plan(args: argparse.Namespace) -> int:
    _, _, plan = make_plan(args)
    print_plan(plan)
    if args.output_json is not None:
        args.output_json.write_text(plan_json(plan.targets()) + "\n")
        print(f"\nwrote {len(plan.moves)} moves to {args.output_json}")
    return 0


def check_move_flags(args: argparse.Namespace) -> None:
    """The moving flags of `balance` and `pool move-broker`, refused before anything is asked."""
    if args.max_concurrent_moves < 1:
        raise SystemExit("weir: --max-concurrent-moves must be 1 or more")
    if args.throttle is not None and args.throttle <= 0:
        raise SystemExit("weir: --throttle must be a positive number of bytes a second")
    if args.adaptive_throttle and args.throttle is None:
        raise SystemExit("weir: --adaptive-throttle needs --throttle")


def execute(args: argparse.Namespace, cluster: Cluster, state: ClusterState, plan: Plan) -> Outcome:
    """`plan`'s moves carried out as the flags say, each start and end printed."""
    return Executor(
        cluster, plan.moves, max_concurrent=args.max_concurrent_moves, throttle=args.throttle,
        timeout_s=args.timeout, admin=lambda: admin_client(args),
        report=lambda line: print(line, flush=True),
        idle_of=idle_reader(state.metrics) if args.adaptive_throttle else None,
    ).run()  # fmt: skip


def run_balance(args: argparse.Namespace) -> int:
    check_move_flags(args)
    cluster, state, plan = make_plan(args)
    print_plan(plan)
    if args.dry_run or not plan.moves:
        return 0
    print()
    outcome = execute(args, cluster, state, plan)
    print(f"\n{len(outcome.done)} moves done, {len(outcome.cancelled)} cancelled, "
          f"{len(outcome.refused)} refused; {outcome.leaders_elected} leaders elected")
    for tp, why in sorted(outcome.cancelled.items()):
        print(f"weir: {name(tp)} not moved: {why}", file=sys.stderr)
    for failure in outcome.election_failures:
        print(f"weir: leader election: {failure}", file=sys.stderr)
    return 0 if outcome.clean else 1


def run_start(args: argparse.Namespace) -> int:
    settings = ServiceSettings(
        interval_s=args.interval, window_s=args.window_seconds, windows=args.windows,
        balance_threshold=args.balance_threshold, heal_after_s=args.heal_after,
        max_concurrent=args.max_concurrent_moves, max_moves=args.max_moves,
        throttle=args.throttle, move_timeout_s=args.timeout,
        adaptive_throttle=args.adaptive_throttle,
    )  # fmt: skip
    try:
        settings.check()
    except ValueError as exc:
        raise SystemExit(f"weir: {exc}") from None
    stop = threading.Event()

    def stopping(signum: int, _frame: object) -> None:
        print(f"operator {args.id}: {signal.Signals(signum).name}: stopping", flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    service = OperatorService(
        args.zookeeper, Cluster(args), settings, identifier=args.id,
        admin=lambda: admin_client(args), report=lambda line: print(line, flush=True),
        session_timeout_s=args.zookeeper_session_timeout_ms / 1000,
    )  # fmt: skip
    print(f"operator {args.id}: started", flush=True)
    service.run(stop)
    return 0


def run_move_broker(args: argparse.Namespace) -> int:
    check_move_flags(args)
    cluster = Cluster(args)
    try:
        state = cluster_state(cluster, need_metrics=False)
        history = LoadHistory(1)
        if len(state.metrics) == len(state.brokers):
            history = measure(state.metrics, args.window_seconds, args.windows)
        else:
            print("weir: not every broker serves metrics: replicas placed by counts alone",
                  file=sys.stderr)  # fmt: skip
        plan = emptying_plan(state, args.broker, args.to, state.loads(history))
    except (LoadError, PlanError) as exc:
        raise SystemExit(f"weir: {exc}") from None
    print_plan(plan)
    if plan.moves:
        print()
        outcome = execute(args, cluster, state, plan)
        if not outcome.clean or len(outcome.done) != len(plan.moves):
            for tp, why in sorted({**outcome.cancelled, **outcome.refused}.items()):
                print(f"weir: {name(tp)} not moved: {why}", file=sys.stderr)
            raise SystemExit(f"weir: broker {args.broker} was not emptied; its pool is unchanged")
    error = cluster.alter_configs(BROKER_RESOURCE, str(args.broker), [(BROKER_POOL, args.to, SET)],
                                  args.broker)  # fmt: skip
    if error:
        raise SystemExit(f"weir: broker {args.broker} is empty, but its pool was not changed: "
                         f"{error}")  # fmt: skip
    where = f"pool {args.to!r}" if args.to else "no pool"
    print(f"Broker {args.broker} holds no replicas and is in {where} now; "
          "`weir operator balance` gives it its share.")
    return 0
