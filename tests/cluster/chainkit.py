"""The chain's chaos schedule, shared by tests/cluster/test_cluster_agent_exactly_once.py (a few
rounds) and bench/chain.py (the long form): an application sends log lines (`chain_line`: JSON
lines, and now and then one that no format parses) through `weir agent` (exactly-once) to a
three-broker cluster, and `weir pipeline logs --dedupe` streams the topic into the warehouse
(Parquet), while, round after round:

- the agent is killed with -9 mid-send and restarted;
- a schedule kills -9 the leader of a partition or the controller, or pauses a broker (SIGSTOP);
- every second round, the ETL's driver (its Python process, its JVM and their workers) is killed
  with -9 at a random moment, and restarted from its checkpoint at once: the round begins once
  the ETL has committed a micro-batch since its last start (the copies below give it one), so
  each kill finds it running, with the application's lines arriving;
- another producer writes copies of records already in the topic after them, as a client does
  that sends again after a timeout (`Copier`); each copy carries a header (`COPY_HEADER`) that
  only the checkers read.

A killed broker is restarted at the end of its round and the next round waits (bounded) for
every partition's ISR to be full again. At the end the agent delivers what it holds and the ETL
catches up with the topic. Two checkers then read what landed: the topic read_committed, the
copies left aside (`agent_process.tally`: the agent's hop), and the warehouse
(`warehouse_tally`): every event the agent answered is in `logs` exactly once with the fields it
was sent with, every line no format parses is in `quarantine` exactly once, and nothing else is
in either.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cluster_brokers import UNSETTLED, ClusterBroker, MetadataView, metadata_of
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

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
from pipeline_spark import LogsJobProcess, warehouse_rows  # noqa: E402

#: broker settings for the chain's cluster
BROKER_CONFIG: dict[str, object] = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
}
EXACTLY_ONCE = 'delivery_guarantee = "exactly-once"\n'
ISR_TIMEOUT_S = 120.0
CATCH_UP_TIMEOUT_S = 600.0
ETL_READY_TIMEOUT_S = 180.0
COPIER_TRIES = 5
COPY_HEADER = "chain.copy"
ETL_RECORDS_PER_TRIGGER = 20_000
UNPARSED_EVERY = 25  # one line in this many is one no format parses
LEVELS = ("info", "warn", "error", "debug")
LOGGED_LEVELS = {"info": "INFO", "warn": "WARN", "error": "ERROR", "debug": "DEBUG"}
EPOCH = datetime(2026, 1, 2, tzinfo=UTC)
_MESSAGE = re.compile(r"event e(\d+)\Z")


def chain_line(number: int) -> bytes:
    """The application's event number ``number``: a JSON line, or one no format parses."""
    if number % UNPARSED_EVERY == UNPARSED_EVERY - 1:
        return f"e{number} ~ no format reads this line ~".encode()
    stamp = (EPOCH + timedelta(milliseconds=100 * number)).isoformat(timespec="milliseconds")
    document = {"timestamp": stamp.replace("+00:00", "Z"), "level": LEVELS[number % 4],
                "host": "chain-app", "message": f"event e{number}", "seq": number,
                "amount": f"{number % 997}.{number % 100:02d}"}  # fmt: skip
    return json.dumps(document).encode()


def as_logged(number: int) -> dict[str, Any]:
    """The ``logs`` columns the event ``number`` should have."""
    document = json.loads(chain_line(number))
    return {
        "timestamp": EPOCH + timedelta(milliseconds=100 * number),
        "level": LOGGED_LEVELS[document["level"]],
        "host": document["host"],
        "message": document["message"],
        "fields": sorted([("amount", document["amount"]), ("seq", str(number))]),
    }


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


@dataclass(frozen=True, slots=True, kw_only=True)
class WarehouseTally:
    """What the checker found in the warehouse the ETL wrote for an `Application`."""

    answered: int
    in_table: int  # rows in logs and quarantine
    quarantined: int
    duplicates: int
    missing: int
    foreign: int  # rows of no event the application sent
    altered: int  # rows whose columns differ from what the event was sent with

    def summary(self) -> str:
        return (f"{self.answered} answered, {self.in_table} in the table ({self.quarantined} "
                f"quarantined), {self.duplicates} duplicates, {self.missing} missing")  # fmt: skip

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.missing or self.foreign or self.altered)


def warehouse_tally(warehouse: Path, application: Application) -> WarehouseTally:
    """Every answered event once in ``logs`` (with its columns as sent) or, if no format parses
    it, in ``quarantine``; nothing the application did not send (an event stored but not
    answered when the agent died may be there, once)."""
    sent = set(application.attempted)
    logs = warehouse_rows(warehouse, "logs", ["message", "timestamp", "level", "host", "fields"])
    quarantine = warehouse_rows(warehouse, "quarantine", ["line"])
    found: Counter[bytes] = Counter()
    foreign = altered = 0
    for row in logs:
        matched = _MESSAGE.match(row["message"] or "")
        number = int(matched.group(1)) if matched else -1
        if number < 0 or chain_line(number) not in sent:
            foreign += 1
            continue
        found[chain_line(number)] += 1
        altered += {**row, "fields": sorted(row["fields"] or [])} != as_logged(number)
    for row in quarantine:
        line = (row["line"] or "").encode()
        if line not in sent:
            foreign += 1
            continue
        found[line] += 1
    return WarehouseTally(
        answered=len(application.answered),
        in_table=len(logs) + len(quarantine),
        quarantined=len(quarantine),
        duplicates=sum(count - 1 for count in found.values() if count > 1),
        missing=len(application.answered - set(found)),
        foreign=foreign,
        altered=altered,
    )


class Copier:
    """Another producer, writing again records already in the topic: reads up to ``count``
    committed records from near the end of a partition (a random one that has some: from its
    high watermark less ``count``, as a broker answers it, which may lag while leadership moves)
    and produces copies of them to the same partition, with their headers (so they name the
    same events) and `COPY_HEADER`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rng: random.Random) -> None:
        self.bootstrap, self.topic, self.partitions, self.rng = bootstrap, topic, partitions, rng

    def copy_some(self, count: int) -> int:
        """Returns how many copies were acknowledged."""
        candidates = self.rng.sample(range(self.partitions), self.partitions)
        for partition in candidates:
            originals = self._last(partition, count)
            if originals:
                break
        else:
            return 0
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "log_level": 0})  # fmt: skip
        delivered = []

        def report(error: KafkaError | None, _message: Any) -> None:
            delivered.append(error is None)

        for value, key, headers in originals:
            copied = [*headers, (COPY_HEADER, b"1")]
            producer.produce(
                self.topic, value, key, partition=partition, headers=copied, on_delivery=report
            )
        producer.flush(60)
        return sum(delivered)

    def _last(self, partition: int, count: int) -> list[tuple[bytes, bytes | None, list[Any]]]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chain-copier",
                             "isolation.level": "read_committed", "enable.partition.eof": True,
                             "enable.auto.commit": False, "log_level": 0})  # fmt: skip
        try:
            marks = self._watermarks(consumer, partition)
            if marks is None:
                return []
            low, high = marks
            consumer.assign([TopicPartition(self.topic, partition, max(low, high - count))])
            found: list[tuple[bytes, bytes | None, list[Any]]] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                for message in consumer.consume(1000, 0.5):
                    error = message.error()
                    if error is not None and error.code() == KafkaError._PARTITION_EOF:
                        return found
                    headers = message.headers() or []
                    if error is None and all(name != COPY_HEADER for name, _ in headers):
                        found.append((message.value(), message.key(), headers))
                if len(found) >= count:
                    return found[:count]
            return found
        finally:
            consumer.close()

    def _watermarks(self, consumer: Consumer, partition: int) -> tuple[int, int] | None:
        """The partition's watermarks, asked again while its leader is moving (None if it
        still has none after a few tries: no copies then)."""
        for _ in range(COPIER_TRIES):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=30
                )
                return int(low), int(high)
            except KafkaException:
                time.sleep(1)
        return None


@dataclass
class ChainRun:
    """What a run did and found."""

    rounds: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    resumes: Counter[str] = field(default_factory=Counter)
    copies: int = 0  # copies the other producer wrote
    etl_kills: int = 0
    etl_exits: int = 0  # times the ETL had stopped by itself when a round looked
    etl_exit_reasons: Counter[str] = field(default_factory=Counter)  # its last words, each time
    etl_duplicates: int = 0  # copies the ETL dropped
    seconds: float = 0.0
    found: Tally | None = None
    warehouse: WarehouseTally | None = None

    def summary(self) -> str:
        topic = self.found.summary() if self.found else "not checked"
        table = self.warehouse.summary() if self.warehouse else "not checked"
        return (f"{self.rounds} rounds, faults {dict(self.faults)}, ETL driver killed "
                f"{self.etl_kills}x, batches in flight at an agent kill {dict(self.resumes)}, "
                f"{self.copies} copies written by another producer, {self.etl_duplicates} "
                f"dropped by the ETL; topic: {topic}; warehouse: {table}")  # fmt: skip


class Chain:
    """The application, the agent, the ETL and the cluster of one run."""

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
        self.application = Application(self.agent.socket, topic, chain_line, keyed=False)
        (directory / "etl").mkdir(parents=True, exist_ok=True)
        self.etl = LogsJobProcess(bootstrap, topic, directory / "etl", "--dedupe",
                                  max_records_per_trigger=ETL_RECORDS_PER_TRIGGER)  # fmt: skip
        self.copier = Copier(bootstrap, topic, partitions, rng)
        self.run = ChainRun()
        self._etl_batches_at_start = 0

    def rounds(
        self,
        count: int,
        time_limit_s: float = float("inf"),
        progress: Callable[[ChainRun], object] | None = None,
    ) -> ChainRun:
        """Runs ``count`` rounds (none starts after ``time_limit_s``), calling ``progress``
        after each."""
        started = time.monotonic()
        for number in range(count):
            if time.monotonic() - started > time_limit_s:
                break
            self._round(number)
            self.run.seconds = time.monotonic() - started
            if progress is not None:
                progress(self.run)
        self.run.seconds = time.monotonic() - started
        return self.run

    def _round(self, number: int) -> None:
        self._wait_full_isr()
        self.run.copies += self.copier.copy_some(self.rng.randint(20, 200))
        self._ensure_etl()
        kill_etl = number % 2 == 1 and self._etl_committed_since_start()
        self.agent.start(timeout=60)
        thread, stop = self.application.round_in_background()
        time.sleep(self.rng.uniform(0.3, 1.0))
        etl_first = self.rng.random() < 0.5
        if kill_etl and etl_first:
            self._kill_etl()
        fault = fault_of(number)
        victim = self._victim(fault) if fault else None
        if victim is not None:
            self._inflict(fault, victim)
        if kill_etl and not etl_first:
            self._kill_etl()
        self.agent.kill()
        stop.set()
        thread.join()
        if victim is not None and not victim.running():
            victim.start()
        self.run.rounds += 1

    def _ensure_etl(self) -> None:
        if self.etl.running():
            return
        if self.etl.process is not None:
            self.run.etl_exits += 1
            lines = [line for line in self.etl.output().splitlines() if line.startswith("weir:")]
            self.run.etl_exit_reasons[lines[-1][:300] if lines else "(no message)"] += 1
            self.etl.close()
        self._etl_batches_at_start = len(self.etl.committed())
        self.etl.start()

    def _etl_committed_since_start(self) -> bool:
        """Waits (bounded) until the ETL committed a micro-batch since it last started."""
        deadline = time.monotonic() + ETL_READY_TIMEOUT_S
        while time.monotonic() < deadline and self.etl.running():
            if len(self.etl.committed()) > self._etl_batches_at_start:
                return True
            time.sleep(0.2)
        return False

    def _kill_etl(self) -> None:
        """Kill -9 the ETL's driver (its whole process group) and start it again at once."""
        if not self.etl.running():
            return
        self.etl.kill()
        self.run.etl_kills += 1
        self._etl_batches_at_start = len(self.etl.committed())
        self.etl.start()

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
        """Start the agent once more and let it deliver everything, read the topic, let the
        ETL catch up with it, stop the ETL and read the warehouse."""
        self._wait_full_isr()
        self.agent.start(timeout=60)
        try:
            wait_drained(self.agent, timeout=120)
            first = next(iter(self.cluster.values()))
            records = read_committed(first.bootstrap, self.topic, self.partitions, timeout=120)
        finally:
            self.agent.stop()
        in_topic = sum(len(landed) for landed in records.values())
        originals = {p: [(v, h) for v, h in landed if COPY_HEADER not in h]
                     for p, landed in records.items()}  # fmt: skip
        self.run.found = tally(originals, self.application, agent_identity(self.agent))
        self.run.resumes.update(self.agent.resumes())
        self._ensure_etl()
        try:
            self.etl.wait_for(lambda: self._etl_records() >= in_topic, "the ETL to catch up",
                              timeout=CATCH_UP_TIMEOUT_S)  # fmt: skip
            assert self.etl.terminate() == 0, self.etl.output()
        finally:
            self.etl.close()
        self.run.etl_duplicates = sum(m.get("duplicates", 0) for m in self.etl.committed())
        self.run.warehouse = warehouse_tally(self.etl.warehouse, self.application)
        return self.run

    def _etl_records(self) -> int:
        return sum(marker["records"] for marker in self.etl.committed())

    def close(self) -> None:
        """Stops what still runs (after a failure)."""
        self.etl.close()
        if self.agent.process is not None:
            self.agent.kill()
