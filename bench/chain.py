"""The chain end to end, long form: an application's log lines through `weir agent`
(exactly-once) to three brokers and through `weir pipeline logs --dedupe` into the warehouse,
against a real ZooKeeper and three brokers on loopback (replication factor 3, min.insync.replicas
2, three partitions).

First the rates, with nothing failing, each hop on a topic of its own:
- agent → topic alone: the application sends through the agent for `--hop-seconds`; events
  answered over the time from the first send until the agent has delivered them all;
- ETL alone: `weir pipeline logs --once --dedupe` over what the agent wrote (records over its
  query's time, as the job reports it; and over the whole command, Spark's start included);
- end to end: the ETL streams (started and past its first micro-batch) while the application
  sends through the agent for `--hop-seconds`; events answered over the time from the first
  send until the warehouse holds every record of the topic.

Then the chaos schedule of tests/cluster/chainkit.py over `--rounds` rounds (default 50; none
starts after `--time-limit` seconds): each round the agent is killed with -9 and restarted, a
leader or the controller is killed with -9 or a broker paused, the ETL's driver is killed with
-9 and restarted from its checkpoint (once it committed a batch since its start), and another
producer writes copies of records already in the topic. At the end the checkers read the topic
read_committed and the warehouse.

Prints and writes (bench/results/chain-<time>.json, or --out) the rates, the events answered,
the events in the topic and in the table, duplicates and missing, the faults, and the chaos
run's events/s; exits 1 when a checker found an anomaly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from agent_process import AgentProcess, Application, read_committed, wait_drained
from chainkit import BROKER_CONFIG, EXACTLY_ONCE, Chain, ChainRun, chain_line
from cluster_brokers import BrokerSet, ClusterBroker, create_topics, start_three
from cluster_processes import start_zookeeper
from confluent_kafka.admin import AdminClient, NewTopic
from pipeline_spark import LogsJobProcess, produce, run_logs_job_command

import faultbench
from weir.cli.zookeeper import find_installation

PARTITIONS = 3
TOPIC = "chain"
AGENT_HOP_TOPIC = "hop-agent"
END_TO_END_TOPIC = "hop-chain"
CATCH_UP_TIMEOUT_S = 600


def main() -> int:
    args = arguments()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"chain: seed {seed}")
    with tempfile.TemporaryDirectory(prefix="weir-chain-") as scratch:
        directory = Path(scratch)
        zookeeper = start_zookeeper(directory / "zookeeper", find_installation())
        brokers = BrokerSet(directory / "brokers")
        try:
            cluster = start_three(brokers, zookeeper.connect, BROKER_CONFIG)
            admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap, "log_level": 0})
            for topic in (TOPIC, AGENT_HOP_TOPIC, END_TO_END_TOPIC):
                create_topics(admin, NewTopic(topic, PARTITIONS, 3,
                                              config={"min.insync.replicas": "2"}))  # fmt: skip
            hops = hop_rates(cluster, directory / "hops", args.hop_seconds)
            print(f"chain: {json.dumps(hops)}", flush=True)
            chain = Chain(cluster, directory / "chaos", TOPIC, PARTITIONS, random.Random(seed))
            try:
                chain.rounds(args.rounds, args.time_limit, progress=print_progress)
                try:
                    run = chain.check()
                except Exception:
                    print_transactions(cluster[1].bootstrap)
                    raise
            finally:
                chain.close()
        finally:
            brokers.kill_all()
            zookeeper.stop()
    found, table = run.found, run.warehouse
    assert found is not None and table is not None
    report = {
        "seed": seed,
        "rounds": run.rounds,
        "faults": dict(run.faults),
        "etl_driver_kills": run.etl_kills,
        "etl_stopped_by_itself": run.etl_exits,
        "etl_stopped_because": dict(run.etl_exit_reasons),
        "copies_by_another_producer": run.copies,
        "copies_dropped_by_the_etl": run.etl_duplicates,
        "batches_in_flight_at_an_agent_kill": dict(run.resumes),
        "seconds": round(run.seconds, 1),
        "chaos_answered_events_per_s": round(found.answered / run.seconds) if run.seconds else None,
        "rates_without_faults": hops,
        "topic": dataclasses.asdict(found),
        "warehouse": dataclasses.asdict(table),
        "machine": faultbench.machine(),
    }
    out = faultbench.results_path(args.out, "chain")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    exact = found.exactly_once and table.exactly_once
    print(f"chain: {run.summary()}; {report['chaos_answered_events_per_s']} answered events/s "
          f"under chaos; events/s without faults: agent→topic {hops['agent_to_topic']}, ETL "
          f"{hops['etl']}, end to end {hops['end_to_end']}; exactly once: {exact}; "
          f"{out}")  # fmt: skip
    return 0 if exact else 1


def print_transactions(bootstrap: str) -> None:
    """What the cluster says of the chain's transactions, when the check could not finish."""
    for command in (["txn", "list"], ["txn", "find-hanging", "--topic", TOPIC,
                                      "--max-transaction-timeout", "1"]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "weir.cli.main", *command, "--bootstrap-server", bootstrap],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        print(f"chain: weir {' '.join(command)}:\n{done.stdout}{done.stderr}", flush=True)


def print_progress(run: ChainRun) -> None:
    print(f"chain: round {run.rounds} done at {run.seconds:.0f}s: faults {dict(run.faults)}, "
          f"ETL driver killed {run.etl_kills}x, {run.copies} copies", flush=True)  # fmt: skip


def hop_rates(cluster: dict[int, ClusterBroker], directory: Path, seconds: float) -> dict[str, Any]:
    """Events/s of each hop alone and of the chain, with nothing failing."""
    bootstrap = ",".join(broker.bootstrap for broker in cluster.values())
    agent = AgentProcess(directory / "agent", bootstrap, config=EXACTLY_ONCE)
    agent.start(timeout=60)
    try:
        answered, started, drained = send_for(agent, AGENT_HOP_TOPIC, seconds)
        agent_seconds = drained - started
        etl_root = directory / "etl-alone"
        etl_root.mkdir(parents=True)
        started = time.monotonic()
        etl = run_logs_job_command([
            "--topic", AGENT_HOP_TOPIC, "--warehouse", str(etl_root / "warehouse"),
            "--checkpoint", str(etl_root / "checkpoint"), "--bootstrap-server", bootstrap,
            "--once", "--master", "local[2]", "--dedupe",
        ])  # fmt: skip
        etl_command_seconds = time.monotonic() - started
        end_to_end = streamed(agent, bootstrap, directory / "etl-streaming", seconds)
    finally:
        agent.stop()
    return {
        "agent_to_topic": round(answered / agent_seconds),
        "agent_to_topic_events": answered,
        "etl": round(etl["records"] / etl["seconds"]),
        "etl_with_spark_start": round(etl["records"] / etl_command_seconds),
        "etl_records": etl["records"],
        **end_to_end,
    }


def send_for(agent: AgentProcess, topic: str, seconds: float) -> tuple[int, float, float]:
    """Sends through the agent for ``seconds``; returns the events answered, when (monotonic)
    the first was sent and when the agent had delivered them all."""
    application = Application(agent.socket, topic, chain_line, keyed=False)
    started = time.monotonic()
    thread, stop = application.round_in_background()
    time.sleep(seconds)
    stop.set()
    thread.join()
    wait_drained(agent, timeout=120)
    return len(application.answered), started, time.monotonic()


def streamed(agent: AgentProcess, bootstrap: str, root: Path, seconds: float) -> dict[str, Any]:
    """The end-to-end rate: the ETL streaming while the application sends through the agent."""
    root.mkdir(parents=True)
    etl = LogsJobProcess(bootstrap, END_TO_END_TOPIC, root, "--dedupe",
                         max_records_per_trigger=100_000)  # fmt: skip
    etl.start()
    try:
        produce(bootstrap.split(",")[0], END_TO_END_TOPIC, [{"value": chain_line(0)}])
        etl.wait_for(lambda: etl.committed(), "the ETL's first micro-batch")
        answered, started, _ = send_for(agent, END_TO_END_TOPIC, seconds)
        records = read_committed(bootstrap.split(",")[0], END_TO_END_TOPIC, PARTITIONS, 120)
        in_topic = sum(len(landed) for landed in records.values())
        etl.wait_for(lambda: sum(m["records"] for m in etl.committed()) >= in_topic,
                     "the ETL to catch up", timeout=CATCH_UP_TIMEOUT_S)  # fmt: skip
        elapsed = time.monotonic() - started
        assert etl.terminate() == 0, etl.output()
    finally:
        etl.close()
    return {"end_to_end": round(answered / elapsed), "end_to_end_events": answered,
            "end_to_end_seconds": round(elapsed, 1)}  # fmt: skip


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--time-limit", type=float, default=3600,
                        help="no round starts after this many seconds")  # fmt: skip
    parser.add_argument("--hop-seconds", type=float, default=20,
                        help="how long the application sends for each rate")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/chain-<time>.json")  # fmt: skip
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(main())
