"""The chain's chaos schedule, shared by tests/cluster/test_cluster_agent_exactly_once.py (a few
rounds) and bench/chain.py (the long form): an application sends events through `weir agent`
(exactly-once) to a three-broker cluster while, round after round, the agent is killed with -9
and restarted, and a schedule kills -9 the leader of a partition or the controller, or pauses a
broker (SIGSTOP) for a moment. A killed broker is restarted at the end of its round and the next
round waits (bounded) for every partition's ISR to be full again. The checker
(`agent_process.tally`) then reads the topic read_committed.

Today the chain ends at the topic; the ETL into the warehouse is its next hop.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cluster_brokers import UNSETTLED, ClusterBroker, MetadataView, metadata_of

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
if str(INTEGRATION) not in sys.path:
    sys.path.insert(0, str(INTEGRATION))

from agent_process import (  # noqa: E402
    AgentProcess,
    Application,
    Tally,
    agent_identity,
    read_committed,
    tally,
    wait_drained,
)

#: broker settings for the chain's cluster
BROKER_CONFIG: dict[str, object] = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
}
EXACTLY_ONCE = 'delivery_guarantee = "exactly-once"\n'
ISR_TIMEOUT_S = 60.0


def fault_of(round_number: int) -> str | None:
    """The broker fault of a round beside the agent's kill: a leader every second round, the
    controller every fifth, a pause every third (the first that applies)."""
    if round_number % 5 == 4:
        return "controller"
    if round_number % 2 == 0:
        return "leader"
    if round_number % 3 == 2:
        return "pause"
    return None


@dataclass
class ChainRun:
    """What a run did and found."""

    rounds: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    resumes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    found: Tally | None = None

    def summary(self) -> str:
        found = self.found.summary() if self.found else "not checked"
        return (f"{self.rounds} rounds, faults {dict(self.faults)}, batches in flight at an "
                f"agent kill {dict(self.resumes)}: {found}")  # fmt: skip


class Chain:
    """The application, the agent and the cluster of one run."""

    def __init__(
        self,
        cluster: dict[int, ClusterBroker],
        directory: Path,
        topic: str,
        partitions: int,
        rng: random.Random,
    ) -> None:
        self.cluster, self.topic, self.partitions, self.rng = cluster, topic, partitions, rng
        bootstrap = ",".join(b.bootstrap for b in cluster.values())
        self.agent = AgentProcess(directory / "agent", bootstrap, config=EXACTLY_ONCE)
        self.application = Application(self.agent.socket, topic)
        self.run = ChainRun()

    def rounds(self, count: int, time_limit_s: float = float("inf")) -> ChainRun:
        started = time.monotonic()
        for number in range(count):
            if time.monotonic() - started > time_limit_s:
                break
            self._round(number)
        self.run.seconds = time.monotonic() - started
        return self.run

    def _round(self, number: int) -> None:
        self._wait_full_isr()
        self.agent.start(timeout=60)
        thread, stop = self.application.round_in_background()
        time.sleep(self.rng.uniform(0.3, 1.0))
        fault = fault_of(number)
        victim = self._victim(fault) if fault else None
        if victim is not None:
            self._inflict(fault, victim)
        self.agent.kill()
        stop.set()
        thread.join()
        if victim is not None and not victim.running():
            victim.start()
        self.run.rounds += 1

    def _victim(self, fault: str | None) -> ClusterBroker | None:
        view = self._metadata()
        if fault == "controller":
            return self.cluster.get(view.controller)
        if fault == "leader":
            leader = view.leaders(self.topic).get(self.rng.randrange(self.partitions), -1)
            return self.cluster.get(leader)
        return self.rng.choice(list(self.cluster.values()))

    def _inflict(self, fault: str | None, victim: ClusterBroker) -> None:
        self.run.faults[fault or ""] += 1
        if fault == "pause":
            victim.pause()
            time.sleep(self.rng.uniform(0.5, 2.0))
            victim.resume()
        else:
            victim.kill()
            time.sleep(self.rng.uniform(0.2, 1.0))

    def _metadata(self) -> MetadataView:
        for broker in self.cluster.values():
            if broker.running():
                try:
                    return metadata_of(broker.address, [self.topic])
                except UNSETTLED:
                    continue
        raise AssertionError("no broker answers Metadata")

    def _wait_full_isr(self) -> None:
        deadline = time.monotonic() + ISR_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                partitions = self._metadata().topics.get(self.topic, {})
            except AssertionError:
                partitions = {}
            if partitions and all(len(p.isr) == len(p.replicas) for p in partitions.values()):
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.topic}: ISR not full within {ISR_TIMEOUT_S:.0f}s")

    def check(self) -> ChainRun:
        """Start the agent once more, let it deliver everything, and read the topic."""
        self._wait_full_isr()
        self.agent.start(timeout=60)
        try:
            wait_drained(self.agent, timeout=120)
            first = next(iter(self.cluster.values()))
            records = read_committed(first.bootstrap, self.topic, self.partitions, timeout=120)
        finally:
            self.agent.stop()
        self.run.found = tally(records, self.application, agent_identity(self.agent))
        self.run.resumes.update(self.agent.resumes())
        return self.run
