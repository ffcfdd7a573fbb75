"""Where an acks=all produce waits on a cluster: every step of the replication round trip, timed.

`cluster_latency.py --trace` starts its brokers through this module (`--serve TRACE_FILE ARGS`):
the broker runs as `weir ARGS`, with wrappers around the functions each step passes through,
and writes what they noted to TRACE_FILE at exit. The wrappers note, on CLOCK_MONOTONIC
(shared by every process on the host, the C client's included):

- on the leader, per Produce: when its handler started, when the batch was appended (its end
  offset), when the handler returned (the ISR has it) and when the response was written;
- on the leader, per follower Fetch: when it arrived, its fetch offset (as `follower_fetched`
  saw it), when a parked fetch was woken, when the handler returned (the log end offset then)
  and when the response was written;
- on the leader, every move of the high watermark;
- on a follower, per fetch round: when the request was sent, the response received, and the
  records appended (its log end offset then);
- on every broker, the event loop's stalls (as `tail_trace.py` notes them).

`steps(traces, leader)` then follows each produce through its round trip, step by step (the
follower whose fetch moved the high watermark is the one followed), and `attribute` matches the
slowest messages of the C client with their produce requests.

Nothing here is imported by the broker: the wrappers are put on at start-up by `serve`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

PRODUCE, FETCH = 0, 1
#: the steps of one produce's round trip, in order, each from the end of the one before
STEPS = (
    "append",            # Produce handler entered -> batch appended on the leader
    "wake_fetch",        # appended -> the follower's parked fetch woken (or its next arriving)
    "fetch_response",    # woken -> its Fetch response written
    "to_follower",       # written -> the follower has read the response
    "follower_append",   # read -> appended on the follower
    "next_fetch",        # appended -> the follower's next Fetch sent
    "to_leader",         # sent -> the leader counts its new fetch offset
    "hw_advance",        # counted -> the high watermark passes the batch
    "produce_done",      # high watermark -> the Produce handler returns
    "produce_response",  # returned -> the Produce response written
)  # fmt: skip

_request: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "request", default=None
)


def _now() -> int:
    return time.monotonic_ns()


def serve(trace_file: Path, argv: list[str]) -> None:
    """`weir argv` with the step wrappers on; the notes written to `trace_file` at exit."""
    from tail_trace import _watch_loop
    from weir.broker import fetcher, replica_manager, server
    from weir.broker.partition import Partition
    from weir.cli.main import main as weir

    produces: list[dict[str, Any]] = []
    fetches: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    watermarks: list[tuple[int, str, int, int]] = []
    counted: list[tuple[int, int, int]] = []
    stalls: list[tuple[int, float, float, float, float]] = []

    def handler(api: int, inner: Any) -> Any:
        async def traced(context: Any, request: Any) -> Any:
            note: dict[str, Any] = {"in": _now()}
            if api == FETCH:
                note["replica"] = getattr(request.body, "replica_id", -1)
            _request.set(note)
            result = await inner(context, request)
            note["done"] = _now()
            if api == FETCH and note["replica"] >= 0:
                note["leo"] = {f"{t}-{i}": p.log.log_end_offset
                               for (t, i), p in context.replicas.partitions.items()
                               if p.is_leader}  # fmt: skip
            return result

        return traced

    handlers = dict(server.HANDLERS)
    handlers[PRODUCE] = handler(PRODUCE, handlers[PRODUCE])
    handlers[FETCH] = handler(FETCH, handlers[FETCH])
    server.HANDLERS = MappingProxyType(handlers)

    send = server.Broker._send

    async def traced_send(transport: Any, response: Any) -> None:
        await send(transport, response)
        note = _request.get()
        if note is None or "done" not in note:
            return
        note["sent"] = _now()
        if "replica" in note:
            if note["replica"] >= 0:
                fetches.append(note)
        elif "end" in note:
            produces.append(note)
        _request.set(None)

    server.Broker._send = staticmethod(traced_send)  # type: ignore[method-assign]

    append = replica_manager.ReplicaManager.append

    def traced_append(self: Any, topic: str, index: int, *args: Any, **kwargs: Any) -> Any:
        result = append(self, topic, index, *args, **kwargs)
        note = _request.get()
        if note is not None:
            note.update(appended=_now(), end=result.end_offset, tp=f"{topic}-{index}")
        return result

    replica_manager.ReplicaManager.append = traced_append  # type: ignore[method-assign]

    wait_for_data = replica_manager.wait_for_data

    async def traced_wait(*args: Any, **kwargs: Any) -> None:
        await wait_for_data(*args, **kwargs)
        note = _request.get()
        if note is not None:
            note.setdefault("woken", []).append(_now())

    replica_manager.wait_for_data = traced_wait

    advance = Partition.advance_high_watermark

    def traced_advance(self: Any) -> None:
        before = self.log.high_watermark
        advance(self)
        if self.log.high_watermark != before:
            watermarks.append((_now(), f"{self.topic}-{self.index}", before,
                               self.log.high_watermark))  # fmt: skip

    Partition.advance_high_watermark = traced_advance  # type: ignore[method-assign]

    fetched = Partition.follower_fetched

    def traced_fetched(self: Any, replica: int, offset: int, now_ms: int) -> None:
        counted.append((_now(), replica, offset))
        fetched(self, replica, offset, now_ms)

    Partition.follower_fetched = traced_fetched  # type: ignore[method-assign]

    fetch_once = fetcher.LeaderFetcher._fetch_once
    exchange = fetcher.LeaderFetcher._exchange
    apply = fetcher.LeaderFetcher._apply

    async def traced_fetch_once(self: Any) -> None:
        note: dict[str, Any] = {"leader": self.leader_id}
        _request.set(note)
        try:
            await fetch_once(self)
        finally:
            _request.set(None)
            if "received" in note:
                note["leo"] = {f"{t}-{i}": f.partition.log.log_end_offset
                               for (t, i), f in self.partitions.items()}  # fmt: skip
                note.setdefault("applied", note["received"])
                rounds.append(note)

    async def traced_exchange(self: Any, api_key: int, version: int, body: Any) -> Any:
        note = _request.get()
        if note is not None and api_key == FETCH:
            note["sent"] = _now()
        response = await exchange(self, api_key, version, body)
        if note is not None and api_key == FETCH:
            note["received"] = _now()
        return response

    def traced_apply(self: Any, followed: Any, data: Any) -> None:
        apply(self, followed, data)
        note = _request.get()
        if note is not None:
            note["applied"] = _now()

    fetcher.LeaderFetcher._fetch_once = traced_fetch_once  # type: ignore[method-assign]
    fetcher.LeaderFetcher._exchange = traced_exchange  # type: ignore[method-assign]
    fetcher.LeaderFetcher._apply = traced_apply  # type: ignore[method-assign]

    serve_requests = server.Broker.serve

    async def serve_watched(broker: Any) -> None:
        asyncio.get_running_loop().create_task(_watch_loop(stalls))
        await serve_requests(broker)

    server.Broker.serve = serve_watched  # type: ignore[method-assign]
    try:
        weir(argv)
    finally:
        trace_file.write_text(json.dumps({
            "produces": produces, "fetches": fetches, "rounds": rounds,
            "watermarks": watermarks, "counted": counted, "stalls": stalls,
        }))  # fmt: skip


# ---- analysis -----------------------------------------------------------------------------------


def _first(items: list[Any], keys: list[int], at: int, ok: Any) -> Any:
    """The first of `items` (sorted by `keys`) at or after `at` for which `ok` holds."""
    for item in items[bisect.bisect_left(keys, at) :]:
        if ok(item):
            return item
    return None


@dataclass
class _FollowerNotes:
    """What the leader and one follower noted of the follower's fetches, sorted for lookups."""

    fetches: list[dict[str, Any]]  # on the leader, by when the handler returned
    rounds: list[dict[str, Any]]  # on the follower, by when the response arrived
    counted: list[tuple[int, int, int]]  # on the leader: (when, replica, fetch offset)

    def __post_init__(self) -> None:
        self.fetches.sort(key=lambda f: f["done"])
        self.rounds.sort(key=lambda r: r["received"])
        self.counted.sort()
        self.fetch_keys = [f["done"] for f in self.fetches]
        self.round_keys = [r["received"] for r in self.rounds]
        self.count_keys = [c[0] for c in self.counted]


def steps(traces: dict[int, dict[str, Any]], leader: int, tp: str) -> list[dict[str, Any]]:
    """Each produce to `tp` on `leader`, its round trip step by step (ms per step, STEPS), the
    follower followed being the one whose fetch moved the high watermark past the batch."""
    lead = traces[leader]
    followers = {
        node: _FollowerNotes(
            [f for f in lead["fetches"] if f["replica"] == node],
            [r for r in trace["rounds"] if r["leader"] == leader],
            [tuple(c) for c in lead["counted"] if c[1] == node],
        )
        for node, trace in traces.items()
        if node != leader
    }
    marks = sorted(w for w in lead["watermarks"] if w[1] == tp)
    mark_keys = [w[0] for w in marks]
    out = []
    for produce in lead["produces"]:
        end = produce.get("end", -1)
        if produce.get("tp") != tp or end < 0:
            continue
        appended = produce["appended"]
        mark = _first(marks, mark_keys, appended, lambda w, e=end: w[3] >= e)
        if mark is None:
            continue
        chosen: tuple[Any, int, _FollowerNotes] | None = None
        for node, notes in followers.items():
            count = _first(notes.counted, notes.count_keys, appended, lambda c, e=end: c[2] >= e)
            if count is None or count[0] > mark[0]:
                continue
            if chosen is None or count[0] > chosen[0][0]:
                chosen = (count, node, notes)
        if chosen is None:
            continue
        count, node, notes = chosen
        fetch = _first(notes.fetches, notes.fetch_keys, appended,
                       lambda f, e=end: f.get("leo", {}).get(tp, -1) >= e)  # fmt: skip
        if fetch is None:
            continue
        got = _first(notes.rounds, notes.round_keys, fetch["sent"],
                     lambda r, e=end: r["leo"].get(tp, -1) >= e)  # fmt: skip
        following = [r for r in notes.rounds if got is not None and r["sent"] >= got["applied"]]
        if got is None or not following:
            continue
        woken = [w for w in fetch.get("woken", []) if w >= appended]
        wake = woken[0] if woken else max(fetch["in"], appended)
        times = [produce["in"], appended, wake, fetch["sent"], got["received"],
                 got["applied"], following[0]["sent"], count[0], mark[0], produce["done"],
                 produce["sent"]]  # fmt: skip
        total_ms = (produce["sent"] - produce["in"]) / 1e6
        row = {"follower": node, "end_offset": end, "in_ns": produce["in"],
               "sent_ns": produce["sent"], "total_ms": total_ms}  # fmt: skip
        for name, a, b in zip(STEPS, times, times[1:], strict=False):
            row[name] = (b - a) / 1e6
        out.append(row)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per step: its median, p99 and max over every produce, ms."""
    if not rows:
        return {}
    result = {}
    for name in (*STEPS, "total_ms"):
        values = sorted(r[name] for r in rows)
        result[name] = {
            "p50": round(statistics.median(values), 3),
            "p99": round(values[int(len(values) * 0.99)], 3),
            "max": round(values[-1], 3),
            "mean": round(statistics.fmean(values), 3),
        }
    return result


def attribute(
    rows: list[dict[str, Any]], client: dict[str, Any], traces: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The slowest messages of the C client (produce-to-ack), each with the produce request that
    carried it (the last one written before its ack) and the loop stalls met meanwhile."""
    start = client["start_monotonic_ns"]
    by_sent = sorted(rows, key=lambda r: r["sent_ns"])
    sent_keys = [r["sent_ns"] for r in by_sent]
    out = []
    for message in client["produce_to_ack"]["slowest"]:
        sent = start + int(message["at_ms"] * 1e6)
        acked = sent + int(message["ms"] * 1e6)
        at = bisect.bisect_right(sent_keys, acked) - 1
        row = by_sent[at] if at >= 0 and by_sent[at]["sent_ns"] >= sent else None
        entry: dict[str, Any] = {"at_ms": message["at_ms"], "ms": message["ms"]}
        if row is not None:
            entry["client_to_handler_ms"] = round((row["in_ns"] - sent) / 1e6, 3)
            entry.update({name: round(row[name], 3) for name in STEPS})
            entry["response_to_client_ms"] = round((acked - row["sent_ns"]) / 1e6, 3)
        entry["loop_stalls_ms"] = {
            node: [round(s[1], 1) for s in trace["stalls"]
                   if s[0] <= acked and s[0] + s[1] * 1e6 >= sent]
            for node, trace in traces.items()
        }  # fmt: skip
        out.append(entry)
    return out


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]), sys.argv[3:])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
