"""Fetch sessions bench (KIP-227): the leader's CPU per fetch round of 1,000 partitions with
little new data, with and without a fetch session, for a follower and for a consumer.

ZooKeeper and brokers 1 and 2; a topic of `--partitions` partitions, all led by broker 1 with
broker 2 as follower; broker 2 is then stopped, and this process fetches from broker 1 in its
place (Fetch v12 by hand, replica id 2) and as a consumer (replica id -1). Each round first
writes one record to each of `--new-per-round` partitions (acks=1, waited for), then makes
four fetches (max wait 0), one per fetcher:
- `follower/sessionless` and `consumer/sessionless`: every partition in every request (session
  id 0, epoch -1), as weir's follower did before fetch sessions;
- `follower/session` and `consumer/session`: a session opened with a full request, then
  incremental requests carrying only the partitions whose fetch offset moved
  (`weir.broker.follower_session` keeps the state, as the follower's fetcher does).
For each fetch: broker 1's CPU time (every thread's, from /proc/<pid>/task/*/schedstat, read
with the broker idle just before the request and just after the response), request and
response bytes, and the round trip. Each fetcher also checks it read every record written.
Writes JSON to bench/results/fetch_sessions-<time>.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from cluster_brokers import CHROOT, BrokerSet, create_topics, metadata_of, poll, wait_settled
from cluster_processes import start_zookeeper
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_fetch import PARTITION_MAX_BYTES, FetchExchange, RawFetcher

from weir.broker.follower_session import FollowerFetchSession, PartitionFetchState
from weir.cli.zookeeper import find_installation

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "sessions-bench"
LEADER, FOLLOWER = 1, 2
CONSUMER = -1
SETTLE_S = 3
#: a pause before and after each fetch, so that the broker's CPU time counted for a fetch is
#: its own: a thread's time is brought up to date when it goes idle, after the response is sent
QUIET_S = 0.005
TopicPartition = tuple[str, int]


def broker_cpu_ns(pid: int) -> int:
    """The CPU time of every thread of process `pid` so far, in nanoseconds."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


@dataclass
class Fetcher:
    """One fetcher of the bench: its connection, where it is in each partition, and its
    session state (None: sessionless)."""

    name: str
    raw: RawFetcher
    offsets: dict[TopicPartition, int]
    session: FollowerFetchSession | None
    cpu_ms: list[float] = field(default_factory=list)
    request_bytes: list[int] = field(default_factory=list)
    response_bytes: list[int] = field(default_factory=list)
    partitions_answered: list[int] = field(default_factory=list)
    round_trip_ms: list[float] = field(default_factory=list)
    records_read: int = 0
    first_fetch: dict[str, float] = field(default_factory=dict)

    def start_measuring(self) -> None:
        """Forget the warm-up's figures, keeping the first fetch's (a session's full one)."""
        self.first_fetch = {"broker_cpu_ms": self.cpu_ms[0], "request_bytes": self.request_bytes[0],
                            "response_bytes": self.response_bytes[0]}  # fmt: skip
        for samples in (self.cpu_ms, self.request_bytes, self.response_bytes,
                        self.partitions_answered, self.round_trip_ms):  # fmt: skip
            samples.clear()

    def fetch(self, pid: int) -> None:
        time.sleep(QUIET_S)
        started_cpu, started = broker_cpu_ns(pid), time.perf_counter()
        answer = self._exchange()
        self.round_trip_ms.append((time.perf_counter() - started) * 1000)
        time.sleep(QUIET_S)
        self.cpu_ms.append((broker_cpu_ns(pid) - started_cpu) / 1e6)
        self.request_bytes.append(answer.request_bytes)
        self.response_bytes.append(answer.response_bytes)
        self.partitions_answered.append(len(answer.partitions))
        for tp, data in answer.partitions.items():
            if data.error_code != ErrorCode.none:
                raise RuntimeError(f"{self.name}: {tp} answered error {data.error_code}")
            if data.next_offset is not None:
                self.records_read += data.next_offset - self.offsets[tp]
                self.offsets[tp] = data.next_offset

    def _exchange(self) -> FetchExchange:
        if self.session is None:
            return self.raw.fetch(self.offsets)
        wanted = {tp: PartitionFetchState(offset, -1, -1, -1, PARTITION_MAX_BYTES)
                  for tp, offset in self.offsets.items()}  # fmt: skip
        request = self.session.next_request(wanted)
        answer = self.raw.fetch(
            {tp: state.fetch_offset for tp, state in request.to_send.items()},
            session_id=request.session_id, epoch=request.epoch, forgotten=request.to_forget,
        )  # fmt: skip
        if not self.session.handle_response(request, answer.error_code, answer.session_id):
            raise RuntimeError(f"{self.name}: session error {answer.error_code}")
        return answer

    def summary(self) -> dict[str, Any]:
        return {
            "fetches": len(self.cpu_ms),
            "broker_cpu_ms_per_fetch": _stats(self.cpu_ms),
            "request_bytes_mean": round(statistics.fmean(self.request_bytes)),
            "response_bytes_mean": round(statistics.fmean(self.response_bytes)),
            "partitions_answered_mean": round(statistics.fmean(self.partitions_answered), 2),
            "round_trip_ms": _stats(self.round_trip_ms),
            "first_fetch": self.first_fetch,
            "records_read": self.records_read,
        }


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"mean": round(statistics.fmean(ordered), 3),
            "p50": round(ordered[len(ordered) // 2], 3),
            "p90": round(ordered[int(len(ordered) * 0.9)], 3)}  # fmt: skip


def start_cluster(scratch: Path, partitions: int) -> tuple[Any, BrokerSet, dict[int, Any]]:
    zookeeper = start_zookeeper(scratch / "zookeeper", find_installation())
    brokers = BrokerSet(scratch / "brokers")
    started = brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 2)
    wait_settled(started.values())
    admin = AdminClient({"bootstrap.servers": started[LEADER].bootstrap, "log_level": 0})
    assignment = [[LEADER, FOLLOWER]] * partitions
    create_topics(admin, NewTopic(TOPIC, partitions, replica_assignment=assignment), timeout=120)

    def all_led() -> bool:
        view = metadata_of(started[LEADER].address, [TOPIC])
        return bool(view.has_leaders(TOPIC, partitions))

    poll(all_led, 180, f"{partitions} partitions led by broker {LEADER}")
    started[FOLLOWER].stop()
    return zookeeper, brokers, started


def run(
    scratch: Path, partitions: int, rounds: int, new_per_round: int, warmup: int
) -> dict[str, Any]:
    zookeeper, brokers, started = start_cluster(scratch, partitions)
    leader = started[LEADER]
    try:
        producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": 1, "linger.ms": 0})
        every = {(TOPIC, p): 0 for p in range(partitions)}
        fetchers: list[Fetcher] = []
        for role, replica_id in (("follower", FOLLOWER), ("consumer", CONSUMER)):
            for with_session in (False, True):
                name = f"{role}/{'session' if with_session else 'sessionless'}"
                raw = RawFetcher(leader.port, replica_id=replica_id, client_id=name, timeout=60)
                session = FollowerFetchSession() if with_session else None
                fetchers.append(Fetcher(name, raw, dict(every), session))
        written = 0
        for r in range(warmup + rounds):
            if r == warmup:
                time.sleep(SETTLE_S)  # the ISR changes the warm-up's follower fetches caused
                for fetcher in fetchers:
                    fetcher.start_measuring()
            for k in range(new_per_round):
                producer.produce(TOPIC, b"v" * 100, partition=(r * new_per_round + k) % partitions)
            if producer.flush(30) != 0:
                raise RuntimeError("records not acknowledged")
            written += new_per_round
            for fetcher in fetchers:
                fetcher.fetch(leader.pid)
        _catch_up(fetchers, leader.pid, written)
        return {f.name: f.summary() for f in fetchers} | {"records_written": written}
    finally:
        brokers.kill_all()
        zookeeper.stop()


def _catch_up(fetchers: list[Fetcher], pid: int, written: int) -> None:
    """Fetch until every fetcher has read every record (a consumer's last ones wait for the
    high watermark); then check none read more or fewer."""
    deadline = time.monotonic() + 30
    while any(f.records_read < written for f in fetchers) and time.monotonic() < deadline:
        for fetcher in fetchers:  # followers first: their fetch offsets move the high watermark
            fetcher.fetch(pid)
    for fetcher in fetchers:
        if fetcher.records_read != written:
            raise RuntimeError(f"{fetcher.name} read {fetcher.records_read} of {written}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--new-per-round", type=int, default=5,
                        help="partitions that get one record before each round")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=20, help="rounds not measured")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "kernel": platform.release()},
        "partitions": args.partitions, "rounds": args.rounds,
        "new_per_round": args.new_per_round, "warmup": args.warmup,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="weir-sessions-bench-") as scratch:
        report["results"] = run(Path(scratch), args.partitions, args.rounds, args.new_per_round,
                                args.warmup)  # fmt: skip
    report["cpu_ratio_session_to_sessionless"] = _ratios(report["results"])
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = args.out or ROOT / "bench" / "results" / f"fetch_sessions-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def _ratios(results: dict[str, Any]) -> dict[str, float]:
    def mean(name: str) -> float:
        return float(results[name]["broker_cpu_ms_per_fetch"]["mean"])

    return {role: round(mean(f"{role}/session") / mean(f"{role}/sessionless"), 3)
            for role in ("follower", "consumer")}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
