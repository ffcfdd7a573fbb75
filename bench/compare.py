"""weir beside RabbitMQ, NATS JetStream and Redis Streams, and beside the machine, in one run.

Installs the peers from Debian's packages when missing (apt-get, as root), starts every server as
a child process on 127.0.0.1 with its data in a temporary directory, and stops them all at the
end, on error and on Ctrl-C alike. Each system then runs the same workloads through its own
client from PyPI: the Kafka paper's producer (200-byte messages, windows of 1 and of 50, each
window acknowledged before the next), one consumer reading everything from the start, a
pipelined producer (about --in-flight messages kept unacknowledged, more sent as acknowledgements
arrive, timed from the first send to the last acknowledgement), the windowed producer and consumer
with 1 KiB messages, and end-to-end latency at a fixed rate. Beside them: loopback TCP
throughput and round trip, page-cache and fsync'd write throughput of the data disk.

Every figure carries its durability, and weir is compared with each peer at the same durability
class (see `compare.report`). A phase that runs past --phase-seconds stops early and reports the
rate over what it finished (marked in the table).

Writes results.json, results.md, throughput.png and latency.png to --out (default
bench/results/compare-<timestamp>/) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compare import physical, report
from compare.charts import latency_chart, throughput_chart
from compare.clients import Driver
from compare.servers import Children, ensure_installed
from compare.stats import latency_summary, throughput
from compare.systems import PACKAGES, SERVERS, SYSTEMS, System

QUICK = {
    "messages": 20_000,
    "batch1_messages": 1_000,
    "large_messages": 5_000,
    "rate": 200,
    "latency_seconds": 3.0,
    "phase_seconds": 20.0,
}
PHYSICAL = {"full": (1024**3, 2.0), "quick": (256 * 1024**2, 0.5)}


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        minutes, seconds = divmod(int(time.monotonic() - self.started), 60)
        print(f"[{minutes:02d}:{seconds:02d}] {text}", flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--messages",
        type=int,
        default=1_000_000,
        help="200-byte messages produced in windows of 50, then consumed",
    )
    parser.add_argument(
        "--batch1-messages",
        type=int,
        default=20_000,
        help="200-byte messages produced one at a time",
    )
    parser.add_argument(
        "--pipelined-messages",
        type=int,
        default=None,
        help="200-byte messages produced pipelined (default: as many as --messages)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=report.IN_FLIGHT,
        help="pipelined producer: messages kept unacknowledged (RabbitMQ, NATS) or per "
        "pipeline (Redis); weir's client bounds its own",
    )
    parser.add_argument(
        "--large-messages",
        type=int,
        default=200_000,
        help="1 KiB messages produced in windows of 50, then consumed",
    )
    parser.add_argument("--rate", type=int, default=1_000, help="latency workload, msgs/s")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument(
        "--phase-seconds",
        type=float,
        default=30.0,
        help="a produce or consume phase stops after this long",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small counts for a smoke run (about 1 to 2 minutes)"
    )
    parser.add_argument(
        "--systems",
        default=",".join(s.key for s in SYSTEMS),
        help="comma-separated subset of: " + ", ".join(s.key for s in SYSTEMS),
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="parent of the temporary data directories (default: system temp)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    if args.pipelined_messages is None:
        args.pipelined_messages = args.messages
    return args


def topic_name(system: System, workload: report.Workload) -> str:
    return f"bench_{system.key}_{workload.key}".replace("-", "_")


def run_system(
    system: System,
    driver: Driver,
    workloads: list[report.Workload],
    results: dict[str, dict[str, Any]],
    progress: Progress,
    phase_seconds: float,
) -> None:
    """Every workload against one system, in order; results go into `results[workload][key]`."""
    produced: dict[str, tuple[str, int]] = {}
    read_later = {w.source for w in workloads if w.source}
    for w in workloads:
        deadline = time.monotonic() + phase_seconds
        if w.kind == "produce":
            name = topic_name(system, w)
            driver.prepare(name)
            if w.in_flight:
                run = driver.pipelined(name, w.count, w.message_bytes, w.in_flight, deadline)
            else:
                run = driver.produce(name, w.count, w.message_bytes, w.batch, deadline)
            got = {
                **throughput(run.messages, w.message_bytes, run.seconds, w.count),
                "failed": run.failed,
            }
            produced[w.key] = (name, run.messages)
            if w.key not in read_later:
                driver.drop(name)
        elif w.kind == "consume":
            name, count = produced[w.source]
            run = driver.consume(name, count, deadline)
            got = throughput(run.messages, w.message_bytes, run.seconds, count)
            driver.drop(name)
        else:
            name = topic_name(system, w)
            driver.prepare(name)
            started = time.perf_counter()
            samples = driver.latency(name, w.rate, w.seconds)
            elapsed = time.perf_counter() - started
            got = {
                **latency_summary(samples),
                "rate_msgs_per_s": w.rate,
                "achieved_msgs_per_s": round(len(samples) / elapsed),
            }
            driver.drop(name)
        results.setdefault(w.key, {})[system.key] = got
        progress(f"{system.label}: {w.title}: {_brief(got)}")


def _brief(got: dict[str, Any]) -> str:
    if "msgs_per_s" in got:
        done = "" if got["complete"] else f" (stopped at {got['messages']:,})"
        if got.get("failed"):
            done += f" ({got['failed']:,} refused)"
        return f"{got['msgs_per_s']:,} msgs/s, {got['mb_per_s']} MB/s{done}"
    return f"p50 {got['p50_ms']} ms, p99 {got['p99_ms']} ms, p99.9 {got['p999_ms']} ms"


def run_servers(
    selected: list[System],
    workloads: list[report.Workload],
    scratch: Path,
    result: dict[str, Any],
    progress: Progress,
) -> None:
    with Children() as children:
        for server_key in dict.fromkeys(s.server for s in selected):
            progress(f"starting {server_key}")
            try:
                server = SERVERS[server_key](children, scratch)
            except Exception as exc:
                result["errors"][server_key] = f"{type(exc).__name__}: {exc}"
                progress(f"{server_key} failed to start: {exc}")
                continue
            for system in (s for s in selected if s.server == server_key):
                driver = system.driver(server)
                result["systems"][system.key].update(server=server.settings, client=driver.settings)
                try:
                    run_system(
                        system,
                        driver,
                        workloads,
                        result["results"],
                        progress,
                        result["options"]["phase_seconds"],
                    )
                except Exception as exc:
                    traceback.print_exc()
                    result["errors"][system.key] = f"{type(exc).__name__}: {exc}"
            for process in server.processes:
                children.stop(process)
            progress(f"stopped {server_key}")


def write_outputs(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "results.md").write_text(report.render_markdown(result))
    throughput_chart(result, out / "throughput.png")
    latency_chart(result, out / "latency.png")


def main() -> int:
    args = parse_args()
    progress = Progress()
    keys = [k.strip() for k in args.systems.split(",") if k.strip()]
    selected = [s for s in SYSTEMS if s.key in keys]
    if not selected or len(selected) != len(keys):
        raise SystemExit(f"unknown system in {args.systems!r}")
    ensure_installed(sorted({PACKAGES[s.server] for s in selected if s.server in PACKAGES}))
    workloads = report.plan(
        messages=args.messages,
        batch1_messages=args.batch1_messages,
        large_messages=args.large_messages,
        rate=args.rate,
        latency_seconds=args.latency_seconds,
        pipelined_messages=args.pipelined_messages,
        in_flight=args.in_flight,
    )
    started_at = datetime.now(UTC)
    out = args.out or Path(__file__).parent / "results" / (
        "compare-" + started_at.strftime("%Y%m%d-%H%M%S")
    )
    options = {k: v for k, v in vars(args).items() if k not in ("out", "data_dir")}
    result: dict[str, Any] = {
        "benchmark": "compare",
        "started_at": started_at.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "options": options,
        "workloads": report.workload_dicts(workloads),
        "systems": {
            s.key: {
                "label": s.label,
                "durability": s.durability,
                "durability_class": s.durability_class,
            }
            for s in selected
        },
        "results": {},
        "errors": {},
    }
    with tempfile.TemporaryDirectory(prefix="weir-compare-", dir=args.data_dir) as tmp:
        scratch = Path(tmp)
        bulk, fsync_seconds = PHYSICAL["quick" if args.quick else "full"]
        progress("measuring the machine's limits")
        result["physical"] = physical.measure(
            scratch, bulk_bytes=bulk, seconds=fsync_seconds, sizes=report.fsync_sizes(workloads)
        )
        result["limits"] = {w.key: report.limits(w, result["physical"]) for w in workloads}
        run_servers(selected, workloads, scratch, result, progress)
    result["duration_s"] = round(time.monotonic() - progress.started, 1)
    write_outputs(result, out)
    print("\n".join(report.summary_lines(result)))
    progress(f"results in {out}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
