"""Controller failover benchmark: time to elect new leaders for N partitions (default 1,000)
after the session of the broker that led them all expires.

A real ZooKeeper (`weir.cli.zookeeper.ZooKeeperServer`) and a real `Controller` on a kazoo
session, as a broker runs them. The brokers are stubs in this process: three kazoo sessions
registered in `/brokers/ids` whose addresses are small servers that answer the controller's
LeaderAndIsr, UpdateMetadata and StopReplica with no error and note when each arrives. Real
broker processes are left out: three of them creating 1,000 partition logs each would measure
the 2-core machine's log creation, not the controller.

Each trial, in a fresh chroot: broker 1 becomes the controller; a topic of N partitions, each
with replicas (3, 2, 1), gets broker 3 as its leader everywhere; broker 3's session is closed,
which ZooKeeper handles as an expiry (its registration goes at once). Measured from that moment:
- `leader_and_isr_s`: until broker 2 has been told by LeaderAndIsr that it leads all N;
- `all_led_s`: until a surviving broker has an UpdateMetadata in which all N have a live leader
  (every partition led again, in ZooKeeper and on the brokers).
With `--baseline REF` the same trials run on that commit's controller too (a temporary git
worktree; trials alternate between the two), in the same run. Writes JSON to
bench/results/controller.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve()
REPO = BENCH.parent.parent
VICTIM, NEW_LEADER, CONTROLLER = 3, 2, 1
LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
_SIZE = struct.Struct(">i")


# ---- the child: one trial, with whichever `weir` is on sys.path ---------------------------------


class StubBroker:
    """A listening socket that answers controller requests with no error and records, per
    request, (arrival time, api key, body)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received: list[tuple[float, int, Any]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            connection, _ = self.server.accept()
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        from weir.protocol.codec import decode_request, encode_response

        supported = {LEADER_AND_ISR: (0, 7), STOP_REPLICA: (0, 4), UPDATE_METADATA: (0, 8)}
        with connection:
            while (payload := _read_frame(connection)) is not None:
                request = decode_request(payload, supported)
                with self.lock:
                    self.received.append((time.perf_counter(), request.api_key, request.body))
                response = _no_error(request)
                connection.sendall(encode_response(request.api_key, request.api_version,
                                                   request.correlation_id, response))  # fmt: skip

    def since(self, started: float, api_key: int) -> list[tuple[float, Any]]:
        with self.lock:
            return [(t, b) for t, k, b in self.received if k == api_key and t >= started]


def _no_error(request: Any) -> Any:
    """The response to a controller request: no error, nothing per partition."""
    from kio.schema.errors import ErrorCode

    from weir.protocol.codec import response_module

    module = response_module(request.api_key, request.api_version)
    response = getattr(module, type(request.body).__name__.replace("Request", "Response"))
    values = {"error_code": ErrorCode.none, "topics": (), "partition_errors": ()}
    names = {f.name for f in dataclasses.fields(response)}
    return response(**{k: v for k, v in values.items() if k in names})


def _read_frame(connection: socket.socket) -> bytes | None:
    header = _read(connection, _SIZE.size)
    return None if header is None else _read(connection, _SIZE.unpack(header)[0])


def _read(connection: socket.socket, count: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = connection.recv(count - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _leaders(body: Any) -> dict[tuple[str, int], int]:
    return {(t.topic_name, p.partition_index): p.leader for t in body.topic_states
            for p in t.partition_states}  # fmt: skip


def _registered_store(connect: str, node_id: int, stub: StubBroker) -> Any:
    from weir.cluster.znodes import BrokerRegistration
    from weir.cluster.zookeeper import ZooKeeperMetadataStore

    store = ZooKeeperMetadataStore(connect, session_timeout_ms=10_000)
    store.start(30)
    store.register(BrokerRegistration(node_id=node_id, host="127.0.0.1", port=stub.port))
    return store


def _controller(store: Any) -> Any:
    """Broker 1's controller on `store`'s session; before the controller's ZooKeeper interface
    existed, the Controller took the store itself."""
    from weir.cluster.controller import Controller, LeaderBalance

    balance = LeaderBalance(enabled=False)
    if next(iter(inspect.signature(Controller).parameters)) == "store":
        return Controller(store, CONTROLLER, balance=balance)
    from weir.cluster.zk_client import KazooZooKeeper

    return Controller(KazooZooKeeper(store), CONTROLLER, balance=balance)


def _wait(condition: Any, timeout_s: float, what: str) -> float:
    deadline = time.perf_counter() + timeout_s
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError(what)
        time.sleep(0.002)
    return time.perf_counter()


def trial(connect: str, partitions: int) -> dict[str, float]:
    stubs = {n: StubBroker() for n in (CONTROLLER, NEW_LEADER, VICTIM)}
    stores = {n: _registered_store(connect, n, stubs[n]) for n in stubs}
    controller = _controller(stores[CONTROLLER])
    controller.start()
    try:
        _wait(lambda: controller.active, 30, "controller elected")
        created = time.perf_counter()
        stores[CONTROLLER].create_topic("bench", partitions, {}, [(3, 2, 1)] * partitions)
        _wait(lambda: _all_led_by(stubs[NEW_LEADER], created, partitions, {VICTIM}), 120,
              "the topic led by broker 3")  # fmt: skip
        expired = time.perf_counter()
        stores[VICTIM].client.stop()
        told = _wait(lambda: _told_to_lead(stubs[NEW_LEADER], expired, partitions), 120,
                     "broker 2 told it leads")  # fmt: skip
        survivors = {CONTROLLER, NEW_LEADER}
        led = _wait(lambda: _all_led_by(stubs[CONTROLLER], expired, partitions, survivors), 120,
                    "all led again")  # fmt: skip
        return {"leader_and_isr_s": round(told - expired, 4), "all_led_s": round(led - expired, 4)}
    finally:
        controller.stop()
        for node_id in (CONTROLLER, NEW_LEADER):
            stores[node_id].close()


def _told_to_lead(stub: StubBroker, since: float, partitions: int) -> bool:
    led = set()
    for _, body in stub.since(since, LEADER_AND_ISR):
        led |= {tp for tp, leader in _leaders(body).items() if leader == NEW_LEADER}
    return len(led) >= partitions


def _all_led_by(stub: StubBroker, since: float, partitions: int, leaders: set[int]) -> bool:
    for _, body in stub.since(since, UPDATE_METADATA):
        states = _leaders(body)
        if len(states) >= partitions and all(leader in leaders for leader in states.values()):
            return True
    return False


# ---- the parent: ZooKeeper, trials on both sides, the report ------------------------------------


def run_trial(source: Path, connect: str, partitions: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(source))
    done = subprocess.run([sys.executable, str(BENCH), "--trial", connect, "--partitions",
                           str(partitions)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"trial on {source} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(trials: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "trials": trials,
        **{f"median_{k}": round(statistics.median(t[k] for t in trials), 4) for k in trials[0]},
    }


def baseline_checkout(ref: str, scratch: Path) -> Path:
    tree = scratch / "baseline-tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), ref],
                   check=True, capture_output=True)  # fmt: skip
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=tree, capture_output=True, check=False)  # fmt: skip
    if built.returncode != 0:
        copy_extensions(tree)
    return tree / "src"


def copy_extensions(tree: Path) -> None:
    """This checkout's compiled extensions, for a baseline whose C sources are the same (when
    the baseline's setup.py cannot build here)."""
    for source in (REPO / "src").rglob("*.c"):
        other = tree / source.relative_to(REPO)
        if not other.exists() or other.read_bytes() != source.read_bytes():
            raise RuntimeError(f"cannot build the baseline, and its {other.name} differs")
    for extension in (REPO / "src").rglob("*.so"):
        shutil.copy2(extension, tree / extension.relative_to(REPO))


def remove_checkout(scratch: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                    str(scratch / "baseline-tree")], capture_output=True)  # fmt: skip


def measure(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    from weir.cli.zookeeper import ZooKeeperServer

    sides = {"current": REPO / "src"}
    if args.baseline:
        sides = {"baseline": baseline_checkout(args.baseline, scratch), **sides}
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    with ZooKeeperServer(scratch / "zookeeper", port=args.zookeeper_port) as server:
        for run in range(args.trials):
            for side, source in sides.items():
                connect = f"{server.connect}/{side}-{run}"
                results[side].append(run_trial(source, connect, args.partitions))
    return {side: summary(trials) for side, trials in results.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--baseline", help="a commit to measure too, trial by trial")
    parser.add_argument("--zookeeper-port", type=int, default=21810)
    parser.add_argument("--trial", metavar="CONNECT", help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "controller.json"
    )
    args = parser.parse_args()
    if args.trial:
        print(json.dumps(trial(args.trial, args.partitions)))
        return 0
    report: dict[str, Any] = {
        "benchmark": "controller",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "partitions": args.partitions,
            "replicas": [VICTIM, NEW_LEADER, CONTROLLER],
            "brokers": "stubs answering the controller's requests",
            "zookeeper": "real, one server",
            "baseline": args.baseline,
        },
    }
    with tempfile.TemporaryDirectory(prefix="weir-bench-") as name:
        scratch = Path(name)
        try:
            report.update(measure(args, scratch))
        finally:
            if args.baseline:
                remove_checkout(scratch)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
