"""The comparison's plan, physical limits per workload, and the Markdown table.

Pure: everything here works on the result dictionary (the JSON written to disk) and measures
nothing. A figure is only ever compared with weir at the same durability class: a broker that
acknowledges before its data is fsync'd is compared with weir's default (page cache), one that
fsyncs before acknowledging with weir's `flush.messages=1` topic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from .stats import ratio

ACK_FIRST = "ack before fsync"
FSYNC_FIRST = "fsync before ack"
CLASSES = (ACK_FIRST, FSYNC_FIRST)
WEIR_BY_CLASS = {ACK_FIRST: "weir", FSYNC_FIRST: "weir-fsync"}
LATENCY_BYTES = 200
IN_FLIGHT = 1_000
PAPER_GOALS = (("produce-200B-b50", 2.0), ("produce-200B-pipelined", 2.0), ("consume-200B", 4.0))


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    key: str
    title: str
    kind: str  # "produce", "consume" or "latency"
    message_bytes: int
    count: int
    batch: int = 0  # produce: each window of `batch` acknowledged before the next
    in_flight: int = 0  # produce, pipelined instead: about this many kept unacknowledged
    source: str = ""  # a consume workload reads what this produce workload wrote
    rate: int = 0
    seconds: float = 0.0


def plan(
    *,
    messages: int,
    batch1_messages: int,
    large_messages: int,
    rate: int,
    latency_seconds: float,
    pipelined_messages: int | None = None,
    in_flight: int = IN_FLIGHT,
) -> list[Workload]:
    """The workloads in the order they run against every system. The pipelined producer sends
    `pipelined_messages` (by default as many as the batch-50 producer) and runs after the
    consumer, once the batch-50 stream is gone."""
    return [
        Workload(
            key="produce-200B-b1",
            title="produce 200 B, batch 1",
            kind="produce",
            message_bytes=200,
            count=batch1_messages,
            batch=1,
        ),
        Workload(
            key="produce-200B-b50",
            title="produce 200 B, batch 50",
            kind="produce",
            message_bytes=200,
            count=messages,
            batch=50,
        ),
        Workload(
            key="consume-200B",
            title="consume 200 B from the start",
            kind="consume",
            message_bytes=200,
            count=messages,
            source="produce-200B-b50",
        ),
        Workload(
            key="produce-200B-pipelined",
            title="produce 200 B, pipelined",
            kind="produce",
            message_bytes=200,
            count=messages if pipelined_messages is None else pipelined_messages,
            in_flight=in_flight,
        ),
        Workload(
            key="produce-1KiB-b50",
            title="produce 1 KiB, batch 50",
            kind="produce",
            message_bytes=1024,
            count=large_messages,
            batch=50,
        ),
        Workload(
            key="consume-1KiB",
            title="consume 1 KiB from the start",
            kind="consume",
            message_bytes=1024,
            count=large_messages,
            source="produce-1KiB-b50",
        ),
        Workload(
            key="latency-200B",
            title=f"end-to-end latency, 200 B at {rate}/s",
            kind="latency",
            message_bytes=LATENCY_BYTES,
            count=int(rate * latency_seconds),
            rate=rate,
            seconds=latency_seconds,
        ),
    ]


def fsync_sizes(workloads: Iterable[Workload]) -> list[int]:
    """The byte counts the workloads make durable at once: one message, one window, or the
    messages a pipelined producer keeps in flight."""
    sizes = {LATENCY_BYTES}
    for w in workloads:
        if w.kind == "produce":
            sizes.add(w.message_bytes * (w.in_flight or w.batch))
    return sorted(sizes)


def limits(workload: Workload, physical: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The physical limit of `workload` per durability class, from the measured limits. Round
    trips and fsyncs count at their median, so that a disk or CPU shared with other work lowers
    the limit as little as possible."""
    if workload.kind == "latency":
        return _latency_limits(physical)
    loop_bw = physical["loopback_tcp"]["mb_per_s"] * 1e6
    if workload.kind == "consume":
        rate = loop_bw / workload.message_bytes
        basis = "loopback TCP bandwidth"
        return {c: {"msgs_per_s": round(rate), "basis": basis} for c in CLASSES}
    if workload.in_flight:
        return _pipelined_limits(workload, physical)
    window = workload.message_bytes * workload.batch
    round_trip_s = physical["loopback_round_trip"]["p50_ms"] / 1e3
    wire_s = round_trip_s + window / loop_bw
    cache_s = window / (physical["page_cache_write"]["mb_per_s"] * 1e6)
    fsync_s = physical["fsync_write"][str(window)]["p50_ms"] / 1e3
    return {
        ACK_FIRST: {
            "msgs_per_s": round(workload.batch / (wire_s + cache_s)),
            "basis": "per window: loopback round trip + transfer + page-cache write",
        },
        FSYNC_FIRST: {
            "msgs_per_s": round(workload.batch / (wire_s + fsync_s)),
            "basis": "per window: loopback round trip + transfer + write and fdatasync",
        },
    }


def _pipelined_limits(workload: Workload, physical: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Sending overlaps acknowledging, so no round trip is paid per message: with the ack before
    the fsync the limit is the slower of loopback TCP and the page cache. With the fsync first,
    each message waits at least a round trip, the transfer and an fdatasync of everything in
    flight (one fsync for all of them at best), so `in_flight` messages complete per such wait
    (Little's law), unless bandwidth is the tighter bound."""
    size = workload.message_bytes
    loop_bw = physical["loopback_tcp"]["mb_per_s"] * 1e6
    cache_bw = physical["page_cache_write"]["mb_per_s"] * 1e6
    streaming = min(loop_bw, cache_bw) / size
    window = size * workload.in_flight
    round_trip_s = physical["loopback_round_trip"]["p50_ms"] / 1e3
    fsync_s = physical["fsync_write"][str(window)]["p50_ms"] / 1e3
    grouped = workload.in_flight / (round_trip_s + window / loop_bw + fsync_s)
    return {
        ACK_FIRST: {
            "msgs_per_s": round(streaming),
            "basis": "pipelined: the slower of loopback TCP bandwidth and page-cache write",
        },
        FSYNC_FIRST: {
            "msgs_per_s": round(min(streaming, grouped)),
            "basis": f"pipelined, {workload.in_flight:,} in flight: each group waits a loopback "
            "round trip + transfer + write and fdatasync of the group",
        },
    }


def _latency_limits(physical: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rtt = physical["loopback_round_trip"]
    fsync = physical["fsync_write"][str(LATENCY_BYTES)]
    keys = ("p50_ms", "p99_ms", "p999_ms")
    return {
        ACK_FIRST: {**{k: rtt[k] for k in keys}, "basis": "loopback round trip"},
        FSYNC_FIRST: {
            **{k: round(rtt[k] + fsync[k], 3) for k in keys},
            "basis": "loopback round trip + fdatasync of 200 B (percentiles summed)",
        },
    }


def workload_dicts(workloads: Iterable[Workload]) -> list[dict[str, Any]]:
    return [asdict(w) for w in workloads]


def weir_ratio(report: dict[str, Any], workload: dict[str, Any], system: str) -> float | None:
    """weir's figure ÷ `system`'s, weir at the system's durability class. Throughput: above 1
    means weir is faster. Latency (p50): below 1 means weir is faster."""
    klass = report["systems"][system]["durability_class"]
    results = report["results"].get(workload["key"], {})
    field = "p50_ms" if workload["kind"] == "latency" else "msgs_per_s"
    ours = results.get(WEIR_BY_CLASS[klass], {}).get(field)
    return ratio(ours, results.get(system, {}).get(field))


def limit_share(report: dict[str, Any], workload: dict[str, Any], system: str) -> float | None:
    """A throughput as a share of the physical limit at the system's durability class, or for
    latency the limit's p50 ÷ the system's p50 (both: 1.0 = at the limit)."""
    klass = report["systems"][system]["durability_class"]
    limit = report["limits"][workload["key"]][klass]
    got = report["results"].get(workload["key"], {}).get(system, {})
    if workload["kind"] == "latency":
        return ratio(limit["p50_ms"], got.get("p50_ms"))
    return ratio(got.get("msgs_per_s"), limit["msgs_per_s"])


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def render_markdown(report: dict[str, Any]) -> str:
    lines = ["# weir beside RabbitMQ, NATS JetStream and Redis Streams", ""]
    lines += _header(report)
    for workload in report["workloads"]:
        lines += ["", f"## {workload['title']}", ""]
        if workload["kind"] == "latency":
            lines += _latency_table(report, workload)
        else:
            lines += _throughput_table(report, workload)
    lines += ["", "## Settings", ""]
    for key, system in report["systems"].items():
        lines.append(
            f"- **{system['label']}** (`{key}`): {system['durability']}; "
            f"server {system['server']}; client {system['client']}"
        )
    return "\n".join(lines) + "\n"


def _header(report: dict[str, Any]) -> list[str]:
    machine = report["machine"]
    lines = [
        f"Run {report['started_at']} on {machine['cpus']} CPUs, {machine['platform']}.",
        "Ratios compare weir with each system at the same durability class "
        f"(*{ACK_FIRST}*: weir's default; *{FSYNC_FIRST}*: weir with flush.messages=1). "
        "Throughput: weir ÷ this, above 1 = weir faster. Latency: weir p50 ÷ this p50, "
        "below 1 = weir faster.",
        "",
        "Paper goals (SEEDS §1):",
        "",
    ]
    for key, goal in PAPER_GOALS:
        workload = next((w for w in report["workloads"] if w["key"] == key), None)
        if workload is None:
            continue
        for peer in ("rabbitmq-classic", "rabbitmq-stream"):
            if peer in report["systems"]:
                value = weir_ratio(report, workload, peer)
                verdict = "—" if value is None else ("met" if value >= goal else "not met")
                lines.append(
                    f"- {workload['title']}: weir ÷ {report['systems'][peer]['label']} "
                    f"= {_x(value)} (goal ≥ {goal:g}x: {verdict})"
                )
    if report.get("errors"):
        lines += ["", "Failures:", ""]
        lines += [f"- {where}: {error}" for where, error in report["errors"].items()]
    return lines


def _throughput_table(report: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    lines = [
        f"{workload['count']:,} messages of {workload['message_bytes']} B"
        + _produce_shape(workload),
        "",
        "| system | durability | msgs/s | MB/s | weir ÷ this | share of limit |",
        "|---|---|---:|---:|---:|---:|",
    ]
    results = report["results"].get(workload["key"], {})
    for key, system in report["systems"].items():
        got = results.get(key)
        if got is None:
            continue
        partial = "" if got["complete"] else f" ({got['messages']:,} in time)"
        if got.get("failed"):
            partial += f" ({got['failed']:,} refused)"
        ratio_text = "—" if key.startswith("weir") else _x(weir_ratio(report, workload, key))
        lines.append(
            f"| {system['label']}{partial} | {system['durability']} | "
            f"{_num(got['msgs_per_s'])} | {_num(got['mb_per_s'], 1)} | {ratio_text} | "
            f"{_pct(limit_share(report, workload, key))} |"
        )
    for klass, limit in report["limits"][workload["key"]].items():
        lines.append(
            f"| physical limit | {klass}: {limit['basis']} | "
            f"{_num(limit['msgs_per_s'])} | "
            f"{_num(limit['msgs_per_s'] * workload['message_bytes'] / 1e6, 1)} | | |"
        )
    return lines


def _produce_shape(workload: dict[str, Any]) -> str:
    if workload.get("in_flight"):
        return (
            f", pipelined: about {workload['in_flight']:,} kept unacknowledged (each client's "
            "settings say how it bounds them), timed from the first send to the last "
            "acknowledgement."
        )
    if workload["batch"]:
        return f", windows of {workload['batch']}, each acknowledged before the next."
    return "."


def _latency_table(report: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    lines = [
        f"{workload['rate']:,} messages/s for {workload['seconds']:g} s, each acknowledged "
        "before the next.",
        "",
        "| system | durability | p50 ms | p99 ms | p99.9 ms | achieved msgs/s "
        "| weir ÷ this (p50) | limit ÷ this (p50) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    results = report["results"].get(workload["key"], {})
    for key, system in report["systems"].items():
        got = results.get(key)
        if got is None:
            continue
        ratio_text = "—" if key.startswith("weir") else _x(weir_ratio(report, workload, key))
        lines.append(
            f"| {system['label']} | {system['durability']} | {_num(got['p50_ms'], 3)} | "
            f"{_num(got['p99_ms'], 3)} | {_num(got['p999_ms'], 3)} | "
            f"{_num(got.get('achieved_msgs_per_s'))} | {ratio_text} | "
            f"{_x(limit_share(report, workload, key))} |"
        )
    for klass, limit in report["limits"][workload["key"]].items():
        lines.append(
            f"| physical limit | {klass}: {limit['basis']} | {limit['p50_ms']:.3f} | "
            f"{limit['p99_ms']:.3f} | {limit['p999_ms']:.3f} | | | |"
        )
    return lines


def summary_lines(report: dict[str, Any]) -> list[str]:
    """A compact plain-text summary for stdout: one line per workload and system."""
    lines = []
    for workload in report["workloads"]:
        lines.append(workload["title"])
        for key, got in report["results"].get(workload["key"], {}).items():
            label = report["systems"][key]["label"]
            if workload["kind"] == "latency":
                figure = (
                    f"p50 {got['p50_ms']} ms  p99 {got['p99_ms']} ms  p99.9 {got['p999_ms']} ms"
                )
            else:
                figure = f"{got['msgs_per_s']:>10,} msgs/s {got['mb_per_s']:>8.1f} MB/s"
            share = limit_share(report, workload, key)
            versus = "" if key.startswith("weir") else _x(weir_ratio(report, workload, key))
            lines.append(
                f"  {label:<32} {figure}  "
                f"weir÷this {versus:>7}  "
                f"limit {_pct(share) if workload['kind'] != 'latency' else _x(share)}"
            )
    return lines
