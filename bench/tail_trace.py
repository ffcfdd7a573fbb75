"""Where the latency tail comes from: which waits the slowest messages met in the broker.

Runs a single-node broker whose event loop carries a monitor (a task that sleeps 1 ms and notes
every wake-up later than 2.5 ms: how long, how much of it the loop thread and the whole process
spent on a CPU, and how long the loop thread waited runnable for a CPU, from
/proc/self/task/<tid>/schedstat) and a record of GC pauses over 0.5 ms, then drives it with
`latency_client.c` (one partition, 100-byte messages, linger.ms 1, acks=all). Both clocks are
CLOCK_MONOTONIC, so each of the slowest messages is matched with the stalls and pauses that
overlapped it. Prints the summary and writes JSON to bench/results/tail_trace.json (or --out).

`python bench/tail_trace.py --serve DIR READY_FILE TRACE_FILE` is the broker side (the bench
starts it itself).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from broker import build_latency_client

STALL_MS = 1.5  # beyond the monitor's own 1 ms sleep


def _runqueue_ns(path: str) -> int:
    with open(path) as file:
        return int(file.read().split()[1])


async def _watch_loop(stalls: list[tuple[int, float, float, float, float]]) -> None:
    path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
    while True:
        start, on_cpu, process = time.monotonic_ns(), time.thread_time_ns(), time.process_time_ns()
        waited = _runqueue_ns(path)
        await asyncio.sleep(0.001)
        late = (time.monotonic_ns() - start) / 1e6 - 1
        if late > STALL_MS:
            stalls.append((start, late + 1, (time.thread_time_ns() - on_cpu) / 1e6,
                           (time.process_time_ns() - process) / 1e6,
                           (_runqueue_ns(path) - waited) / 1e6))  # fmt: skip


def serve(data_dir: Path, ready: Path, out: Path) -> None:
    """The broker, with the loop monitor and the GC record, written to `out` at exit."""
    from weir.broker import server
    from weir.cli.main import main as weir

    stalls: list[tuple[int, float, float, float, float]] = []
    pauses: list[tuple[int, float, int]] = []
    began = [0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        now = time.monotonic_ns()
        if phase == "start":
            began[0] = now
        elif now - began[0] > 500_000:
            pauses.append((began[0], (now - began[0]) / 1e6, info["generation"]))

    gc.callbacks.append(on_gc)
    serve_requests = server.Broker.serve

    async def serve_watched(broker: server.Broker) -> None:
        asyncio.get_running_loop().create_task(_watch_loop(stalls))
        await serve_requests(broker)

    server.Broker.serve = serve_watched  # type: ignore[method-assign]
    try:
        weir(["broker", "start", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
              "--ready-file", str(ready)])  # fmt: skip
    finally:
        out.write_text(json.dumps({"stalls": stalls, "gc": pauses}))


def attribute(result: dict[str, Any], trace: dict[str, Any], seconds: float) -> dict[str, Any]:
    start = result["start_monotonic_ns"]
    window = (start, start + int((seconds + 2) * 1e9))
    stalls = [s for s in trace["stalls"] if window[0] <= s[0] <= window[1]]
    pauses = [p for p in trace["gc"] if window[0] <= p[0] <= window[1]]
    slowest = []
    for message in result["produce_to_consume"]["slowest"]:
        sent = start + message["at_ms"] * 1e6
        end = sent + message["ms"] * 1e6
        met = [s for s in stalls if s[0] <= end and s[0] + s[1] * 1e6 >= sent]
        paused = [p for p in pauses if p[0] <= end and p[0] + p[1] * 1e6 >= sent]
        slowest.append({"at_ms": message["at_ms"], "ms": message["ms"],
                        "loop_stalls_ms": [round(s[1], 1) for s in met],
                        "of_which_waiting_for_a_cpu_ms": round(sum(s[4] for s in met), 1),
                        "gc_pauses_ms": [round(p[1], 1) for p in paused]})  # fmt: skip
    total = sum(s[1] for s in stalls)
    return {
        "produce_to_ack": {k: v for k, v in result["produce_to_ack"].items() if k != "slowest"},
        "produce_to_consume": {
            k: v for k, v in result["produce_to_consume"].items() if k != "slowest"
        },
        "loop_stalls": {"count": len(stalls), "ms": round(total, 1),
                        "loop_thread_on_cpu_ms": round(sum(s[2] for s in stalls), 1),
                        "whole_broker_on_cpu_ms": round(sum(s[3] for s in stalls), 1),
                        "loop_thread_waiting_for_a_cpu_ms": round(sum(s[4] for s in stalls), 1),
                        "longest_ms": round(max((s[1] for s in stalls), default=0), 1)},
        "gc_pauses": {"count": len(pauses), "ms": round(sum(p[1] for p in pauses), 1)},
        "slowest": slowest,
    }  # fmt: skip


def _cpu_times() -> list[int]:
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--serve", nargs=3, type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "tail_trace.json"
    )
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    with tempfile.TemporaryDirectory(prefix="weir-tail-") as name:
        scratch = Path(name)
        client = build_latency_client(scratch)
        ready, trace = scratch / "ready", scratch / "trace.json"
        broker = subprocess.Popen([sys.executable, __file__, "--serve", str(scratch / "data"),
                                   str(ready), str(trace)], stdout=subprocess.DEVNULL)  # fmt: skip
        while not (ready.exists() and ready.read_text().strip()):
            if broker.poll() is not None:
                raise RuntimeError("broker did not start")
            time.sleep(0.05)
        before = _cpu_times()
        done = subprocess.run([str(client), ready.read_text().split()[0], "tail", str(args.rate),
                               str(args.seconds), "1", "all"], check=True, capture_output=True,
                              timeout=args.seconds + 120)  # fmt: skip
        after = _cpu_times()
        broker.terminate()
        broker.wait(60)
        report = attribute(json.loads(done.stdout), json.loads(trace.read_text()), args.seconds)
    spent = [b - a for a, b in zip(before, after, strict=True)]
    report["machine_idle_share"] = round(spent[3] / sum(spent), 3)
    report["load_average"] = Path("/proc/loadavg").read_text().split()[:3]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
