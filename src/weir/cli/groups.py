"""`weir group list|describe|lag|reset-offsets|delete`, as kafka-consumer-groups.sh does them.

describe shows each partition's committed offset, log end offset and lag with the member that
owns it; reset-offsets prints the plan and changes nothing unless `--execute` is given (the
group must have no active members, as Kafka requires).

lag watches the groups' committed offsets and log end offsets for a while (`--samples` looks,
`--interval` apart; `--watch` goes on, a table per look) and gives each partition and group
Burrow's status from the trend (`weir.cluster.consumer_lag`): OK, WARNING (the lag grows at
every look though the consumer moves), STALL (committed offset still while lag remains), STOP
(no commit for longer than the window spans), REWIND (the offset went back); a group is ERROR
when a partition is STOP, STALL or REWIND. Looking from outside, a commit of an unchanged offset
cannot be told from no commit, so such a consumer shows STOP where Burrow, which reads every
commit, says STALL: both are ERROR.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from weir.cli import kafka_errors
from weir.cli.clients import (
    ADMIN_TIMEOUT,
    add_bootstrap,
    add_client_settings,
    admin_client,
    client_config,
)
from weir.cli.table import print_table
from weir.cluster.consumer_lag import (
    GroupStatus,
    LagWindow,
    Observation,
    PartitionStatus,
    group_status,
)

NO_OFFSET = -1001
DESCRIBE_COLUMNS = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID")  # fmt: skip


def register(commands: Any) -> None:
    group = commands.add_parser("group", help="list, describe, reset and delete consumer groups")
    sub = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="list the consumer groups")
    listing.set_defaults(run=run_list)
    describe = sub.add_parser("describe", help="committed offset, lag and owner of each partition")
    describe.add_argument("group")
    describe.set_defaults(run=run_describe)
    lag = sub.add_parser("lag", help="lag and its Burrow status (OK, WARNING, STALL, STOP)")
    lag.add_argument("groups", nargs="*", metavar="GROUP", help="default: every group")
    lag.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                     help="between two looks (default 2)")
    lag.add_argument("--samples", type=int, default=5, metavar="N",
                     help="looks before the status is printed (default 5)")
    lag.add_argument("--watch", action="store_true",
                     help="keep looking and print a table every interval (Ctrl-C ends)")
    lag.add_argument("--count", type=int, default=0, metavar="N",
                     help="with --watch: stop after N tables (default: never)")
    lag.set_defaults(run=run_lag)
    delete = sub.add_parser("delete", help="delete an empty group and its committed offsets")
    delete.add_argument("group")
    delete.set_defaults(run=run_delete)
    reset = sub.add_parser("reset-offsets", help="move committed offsets (dry run by default)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True, help="TOPIC or TOPIC:P1,P2")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--to-datetime", help="ISO 8601, e.g. 2026-11-21T08:00:00Z")
    target.add_argument("--shift-by", type=int)
    reset.add_argument("--execute", action="store_true", help="apply the plan")
    reset.set_defaults(run=run_reset)
    for parser in (listing, describe, lag, delete, reset):
        add_bootstrap(parser)
        add_client_settings(parser)


def run_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    result = admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT).result()
    for listing in sorted(result.valid, key=lambda g: g.group_id):
        print(listing.group_id)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    description = admin.describe_consumer_groups([args.group])[args.group].result()
    owners = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions:
            owners[(tp.topic, tp.partition)] = member
    committed = _committed(admin, args.group)
    partitions = sorted(set(committed) | set(owners))
    ends = _end_offsets(args, partitions)
    print(f"GROUP {args.group}  STATE {description.state.name}  MEMBERS {len(description.members)}")
    rows = [_describe_row(tp, committed.get(tp), ends.get(tp), owners.get(tp)) for tp in partitions]
    print_table(DESCRIBE_COLUMNS, rows)
    return 0


def _describe_row(
    tp: tuple[str, int], current: int | None, end: int | None, member: Any
) -> tuple[object, ...]:
    lag = None if current is None or end is None else end - current
    owner = (member.member_id, member.host, member.client_id) if member else (None, None, None)
    return (*tp, current, end, lag, *owner)


def _committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request)[group].result()
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0}  # fmt: skip


def _end_offsets(
    args: argparse.Namespace, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    consumer = Consumer(client_config(args, **{"group.id": "weir-group-tool"}))
    try:
        return {(t, p): consumer.get_watermark_offsets(KafkaTopicPartition(t, p),
                                                       timeout=ADMIN_TIMEOUT)[1]
                for t, p in partitions}  # fmt: skip
    finally:
        consumer.close()


LAG_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
               "STATUS")  # fmt: skip


def run_lag(args: argparse.Namespace) -> int:
    """Exit status 0 when every group is OK, 1 when one is not."""
    if args.samples < 1 or args.interval <= 0:
        raise SystemExit("weir: --samples must be at least 1 and --interval above 0")
    admin = admin_client(args)
    groups = args.groups or sorted(
        g.group_id for g in admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT).result().valid
    )
    windows: dict[tuple[str, str, int], LagWindow] = {}
    consumer = Consumer(client_config(args, **{"group.id": "weir-group-tool"}))
    worst = GroupStatus.OK
    try:
        looks = 0
        while True:
            latest = _look(admin, consumer, groups, windows)
            looks += 1
            if looks >= args.samples:
                worst = _print_lag(latest, windows)
                tables = looks - args.samples + 1
                if not args.watch or (args.count and tables >= args.count):
                    break
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0 if worst is GroupStatus.OK else 1


def _look(
    admin: AdminClient, consumer: Consumer, groups: list[str],
    windows: dict[tuple[str, str, int], LagWindow],
) -> dict[tuple[str, str, int], tuple[int, int]]:
    """One look at every group's partitions: (committed offset, log end offset) of each, and
    an observation added to its window when the offset or the lag changed."""
    now = int(time.monotonic() * 1000)
    latest = {}
    for group in groups:
        for (topic, index), offset in _committed(admin, group).items():
            end = consumer.get_watermark_offsets(KafkaTopicPartition(topic, index),
                                                 timeout=ADMIN_TIMEOUT)[1]  # fmt: skip
            key = (group, topic, index)
            latest[key] = (offset, end)
            window = windows.setdefault(key, LagWindow())
            window.add(Observation(offset, max(0, end - offset), now), changes_only=True)
    return latest


def _print_lag(
    latest: dict[tuple[str, str, int], tuple[int, int]],
    windows: dict[tuple[str, str, int], LagWindow],
) -> GroupStatus:
    now = int(time.monotonic() * 1000)
    rows = []
    by_group: dict[str, list[tuple[PartitionStatus, int]]] = {}
    for key in sorted(latest):
        offset, end = latest[key]
        status = windows[key].status(now)
        by_group.setdefault(key[0], []).append((status, max(0, end - offset)))
        rows.append((*key, offset, end, max(0, end - offset), status.value))
    worst = GroupStatus.OK
    for group, entries in sorted(by_group.items()):
        verdict = group_status(s for s, _ in entries)
        print(f"GROUP {group}  STATUS {verdict.value}  TOTAL-LAG {sum(lag for _, lag in entries)}")
        if verdict is GroupStatus.ERROR or worst is GroupStatus.OK:
            worst = verdict
    print()
    print_table(LAG_COLUMNS, rows)
    print(flush=True)
    return worst


def run_delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    admin.delete_consumer_groups([args.group], request_timeout=ADMIN_TIMEOUT)[args.group].result()
    print(f"deleted group {args.group}")
    return 0


def run_reset(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    topic, _, listed = args.topic.partition(":")
    consumer = Consumer(client_config(args, **{"group.id": "weir-group-tool"}))
    try:
        metadata = consumer.list_topics(timeout=ADMIN_TIMEOUT).topics.get(topic)
        if metadata is None or metadata.error is not None:
            print(f"weir: topic {topic!r} not found", file=sys.stderr)
            return 1
        partitions = [int(p) for p in listed.split(",")] if listed else sorted(metadata.partitions)
        committed = _committed(admin, args.group)
        plan = {p: _target(args, consumer, topic, p, committed.get((topic, p))) for p in partitions}
    finally:
        consumer.close()
    print_table(("TOPIC", "PARTITION", "NEW-OFFSET"),
                [(topic, partition, offset) for partition, offset in plan.items()])  # fmt: skip
    if not args.execute:
        print("(dry run: nothing changed; add --execute to apply)")
        return 0
    request = [ConsumerGroupTopicPartitions(
        args.group, [KafkaTopicPartition(topic, p, o) for p, o in plan.items()])]  # fmt: skip
    try:
        admin.alter_consumer_group_offsets(request)[args.group].result()
    except KafkaException as exc:
        print(f"weir: {kafka_errors.error_line(exc.args[0])} (is the group still active?)",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"reset offsets of group {args.group}")
    return 0


def _target(
    args: argparse.Namespace, consumer: Consumer, topic: str, partition: int, current: int | None
) -> int:
    """The offset a reset moves `partition` to, clamped to [earliest, latest]."""
    tp = KafkaTopicPartition(topic, partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=ADMIN_TIMEOUT)
    if args.to_earliest:
        target = low
    elif args.to_latest:
        target = high
    elif args.to_offset is not None:
        target = args.to_offset
    elif args.shift_by is not None:
        target = (current if current is not None else high) + args.shift_by
    else:
        moment = datetime.datetime.fromisoformat(args.to_datetime.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        found = consumer.offsets_for_times(
            [KafkaTopicPartition(topic, partition, int(moment.timestamp() * 1000))],
            timeout=ADMIN_TIMEOUT)[0].offset  # fmt: skip
        target = high if found < 0 else found
    return max(low, min(high, target))
