"""The group list and group pages: pure renderers. A group's lag is its committed offsets
against the log end offsets now; its status is Burrow's, from the console's samples
(`weir.cluster.consumer_lag`, as `weir group lag` judges it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from weir.cluster.consumer_lag import GroupStatus, PartitionStatus
from weir.ops.console.charts import Series, line_chart
from weir.ops.console.history import Points
from weir.ops.console.html import (
    MISSING,
    Html,
    facts,
    group_href,
    join,
    link,
    messages_href,
    num,
    section,
    table,
    tag,
    topic_href,
)
from weir.ops.console.reader import TP, GroupView

#: a partition's (committed offset, log end offset)
Offsets = Mapping[TP, tuple[int, int]]
#: the partitions' lag lines drawn under the total (dashed, so a partition's line equal to it
#: shows through), at most
PARTITION_LINES = 7
PENDING = "after the first sample"


def status_badge(status: GroupStatus | PartitionStatus | None) -> Html:
    if status is None:
        return tag("span", PENDING, class_="status pending")
    return tag("span", status.value, class_=f"status status-{status.value.lower()}")


def total_lag(offsets: Offsets) -> int:
    return sum(max(0, end - committed) for committed, end in offsets.values())


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    state: str
    members: int
    offsets: Offsets
    status: GroupStatus | None


def groups_page(rows: Sequence[GroupRow]) -> Html:
    return table(
        ("GROUP", "STATE", "MEMBERS", "TOPICS", "TOTAL LAG", "STATUS"),
        [(link(group_href(r.group_id), r.group_id), r.state, num(r.members),
          ", ".join(sorted({t for t, _ in r.offsets})) or MISSING,
          num(total_lag(r.offsets)), status_badge(r.status)) for r in rows],
        empty="no consumer groups yet",
        id_="groups",
    )  # fmt: skip


def group_page(
    group: GroupView,
    offsets: Offsets,
    status: GroupStatus | None,
    statuses: Mapping[TP, PartitionStatus],
    lag: Mapping[str, Points],
) -> Html:
    summary = facts([
        ("state", group.state), ("status", status_badge(status)),
        ("total lag", tag("span", total_lag(offsets), id="total-lag")),
        ("members", len(group.members)), ("assignor", group.assignor or MISSING),
        ("coordinator", f"broker {group.coordinator}" if group.coordinator is not None
         else MISSING),
    ])  # fmt: skip
    return join(
        [
            summary,
            section("Lag", _lag_chart(lag)),
            section("Partitions", _partitions(group, offsets, statuses)),
            section("Members", _members(group)),
        ]
    )


def _lag_chart(lag: Mapping[str, Points]) -> Html:
    lines = [Series(name, points) for name, points in lag.items()]
    total = Series(lines[0].name, lines[0].points, dashed=True)
    partitions = lines[1:] if len(lines) - 1 <= PARTITION_LINES else []
    return line_chart([*partitions, total], title="Lag", unit="messages")


def _partitions(group: GroupView, offsets: Offsets, statuses: Mapping[TP, PartitionStatus]) -> Html:
    owners = group.owners()
    rows = []
    for tp in sorted(set(offsets) | set(owners)):
        committed, end = offsets.get(tp, (None, None))
        lag = None if committed is None or end is None else max(0, end - committed)
        owner = owners.get(tp)
        rows.append((
            link(topic_href(tp[0]), tp[0]), num(tp[1]), num(committed), num(end), num(lag),
            status_badge(statuses.get(tp)) if committed is not None else MISSING,
            owner.client_id if owner else MISSING, owner.host if owner else MISSING,
            link(messages_href(tp[0], tp[1], offset=committed), "browse from here")
            if committed is not None else MISSING,
        ))  # fmt: skip
    return table(("TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG", "STATUS", "CLIENT ID",
                  "HOST", ""), rows, empty="no committed offsets", id_="lag")  # fmt: skip


def _members(group: GroupView) -> Html:
    rows = [(m.member_id, m.client_id, m.host, m.instance_id or MISSING,
             ", ".join(f"{t}-{p}" for t, p in m.partitions) or MISSING)
            for m in group.members]  # fmt: skip
    return table(("MEMBER ID", "CLIENT ID", "HOST", "INSTANCE ID", "ASSIGNMENT"), rows,
                 empty="no active members", id_="members")  # fmt: skip
