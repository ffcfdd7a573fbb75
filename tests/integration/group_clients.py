"""Consumer-group members as separate OS processes, for the group tests (test_groups.py).

Run as a script (`python group_clients.py CLIENT ...`), this module is one consumer of one
group, driven by confluent-kafka, kafka-python or aiokafka: it subscribes, reports each
rebalance, processes what it polls, reports the values, and only then commits them (so whatever
it reported may be processed again elsewhere, and nothing it did not report is committed). It
writes one JSON object per line to stdout. SIGTERM makes it close the consumer (leaving the
group) and exit; SIGKILL leaves the group to find out through the session timeout.

Imported, `ConsumerProcess` starts such a child and follows its reports on a reader thread.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

CLIENTS = ("confluent", "kafka-python", "aiokafka")
HEARTBEAT_MS = 500
POLL_S = 0.2
BATCH = 100
STACKS_S = 0.5  # for a child to write its threads' stacks


# ---- the parent's side ---------------------------------------------------------------------


class ConsumerProcess:
    """One child consumer; `assignment`, `processed` and `events` follow what it reported."""

    def __init__(
        self,
        client: str,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        log_dir: Path,
        *,
        session_timeout_ms: int,
        instance_id: str | None = None,
    ) -> None:
        self.name = name
        self.stderr_path = log_dir / f"{name}.stderr"
        self.assignment: set[int] = set()
        self.processed: list[bytes] = []
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        command = [sys.executable, __file__, client, "--bootstrap", bootstrap, "--group", group,
                   "--topic", topic, "--name", name, "--session-timeout-ms",
                   str(session_timeout_ms)]  # fmt: skip
        if instance_id is not None:
            command += ["--instance-id", instance_id]
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
            )
        assert self.process.stdout is not None
        self._reader = threading.Thread(
            target=self._read, args=(self.process.stdout,), name=f"reader-{name}", daemon=True
        )
        self._reader.start()

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            event = json.loads(line)
            with self._changed:
                self.events.append(event)
                if event["e"] == "assigned":
                    self.assignment |= set(event["p"])
                elif event["e"] == "revoked":
                    self.assignment -= set(event["p"])
                elif event["e"] == "processed":
                    self.processed += [v.encode() for v in event["v"]]
                self._changed.notify_all()

    def reported(self, kind: str) -> list[dict[str, Any]]:
        with self._changed:
            return [e for e in self.events if e["e"] == kind]

    def snapshot(self) -> tuple[frozenset[int], list[bytes]]:
        with self._changed:
            return frozenset(self.assignment), list(self.processed)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no last commit; the group notices at the session timeout."""
        self.process.kill()
        self._finish(10)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM: the child closes its consumer (leaving the group) and exits."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self._finish(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self._finish(10)
            raise

    def _finish(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self._reader.join(timeout)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code

    def describe(self) -> str:
        """What the child reported, and its stderr's end: the client's coordinator log and, if
        it is still running, the stack of each of its threads (it dumps them on SIGUSR1)."""
        if self.alive:
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(STACKS_S)
        tail = self.stderr_path.read_text(errors="replace")[-6000:]
        errors = [e["m"] for e in self.reported("error")][-5:]
        return (f"{self.name}: alive={self.alive} assignment={sorted(self.assignment)} "
                f"processed={len(self.processed)} errors={errors}\n  stderr: {tail}")  # fmt: skip


def stop_all(consumers: Iterable[ConsumerProcess]) -> None:
    """Stop every child not stopped or killed yet; kill those that do not stop in time."""
    for consumer in consumers:
        assert consumer.process.stdout is not None
        if not consumer.process.stdout.closed:
            consumer.stop()


# ---- the child's side ----------------------------------------------------------------------


class _Reporter:
    def __init__(self) -> None:
        self.stopping = False
        signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    @staticmethod
    def emit(kind: str, **fields: Any) -> None:
        print(json.dumps({"e": kind, **fields}), flush=True)

    def processed(self, values: list[bytes]) -> None:
        if values:
            self.emit("processed", v=[v.decode() for v in values])


def _confluent(args: argparse.Namespace, report: _Reporter) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
              "client.id": args.name, "session.timeout.ms": args.session_timeout_ms,
              "heartbeat.interval.ms": HEARTBEAT_MS, "auto.offset.reset": "latest",
              "enable.auto.commit": False, "enable.partition.eof": False}  # fmt: skip
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    consumer.subscribe(
        [args.topic],
        on_assign=lambda _c, ps: report.emit("assigned", p=[p.partition for p in ps]),
        on_revoke=lambda _c, ps: report.emit("revoked", p=[p.partition for p in ps]),
        on_lost=lambda _c, ps: report.emit("revoked", p=[p.partition for p in ps]),
    )
    while not report.stopping:
        messages = consumer.consume(BATCH, POLL_S)
        errors = [m.error() for m in messages if m.error() is not None]
        for error in errors:
            report.emit("error", m=str(error))
        good = [m for m in messages if m.error() is None]
        report.processed([m.value() for m in good])
        ends: dict[int, int] = {}
        for m in good:
            ends[m.partition()] = m.offset() + 1
        if ends:
            offsets = [TopicPartition(args.topic, p, o) for p, o in ends.items()]
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                report.emit("error", m=f"commit: {exc}")
    consumer.close()


def _kafka_python(args: argparse.Namespace, report: _Reporter) -> None:
    import kafka.errors
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            report.emit("revoked", p=[tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned: Any) -> None:
            report.emit("assigned", p=[tp.partition for tp in assigned])

    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                             client_id=args.name, group_instance_id=args.instance_id,
                             session_timeout_ms=args.session_timeout_ms,
                             heartbeat_interval_ms=HEARTBEAT_MS, auto_offset_reset="latest",
                             enable_auto_commit=False, max_poll_records=BATCH)  # fmt: skip
    # Know the topic before joining. A kafka-python 3.0.12 member that subscribed first fetches
    # the topic's metadata in the middle of its first rebalances; under CPU load a leader doing
    # so sometimes never finished its join: it received its SyncGroup response and then stayed
    # silent, until the group dropped it: in 4 of 37 runs of the scenario beside two busy
    # processes, and in none of 40 with the topic known first.
    consumer.partitions_for_topic(args.topic)
    consumer.subscribe([args.topic], listener=Listener())
    while not report.stopping:
        batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
        report.processed([r.value for records in batches.values() for r in records])
        offsets = {TopicPartition(tp.topic, tp.partition):
                   OffsetAndMetadata(rs[-1].offset + 1, "", -1)
                   for tp, rs in batches.items() if rs}  # fmt: skip
        if offsets:
            try:
                consumer.commit(offsets)
            except kafka.errors.KafkaError as exc:
                report.emit("error", m=f"commit: {exc!r}")
    consumer.close()


def _aiokafka(args: argparse.Namespace, report: _Reporter) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            report.emit("revoked", p=[tp.partition for tp in revoked])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            report.emit("assigned", p=[tp.partition for tp in assigned])

    async def run() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                                    client_id=args.name, group_instance_id=args.instance_id,
                                    session_timeout_ms=args.session_timeout_ms,
                                    heartbeat_interval_ms=HEARTBEAT_MS,
                                    auto_offset_reset="latest",
                                    enable_auto_commit=False)  # fmt: skip
        consumer.subscribe([args.topic], listener=Listener())
        await consumer.start()
        try:
            while not report.stopping:
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000), max_records=BATCH)
                report.processed([r.value for records in batches.values() for r in records])
                offsets = {tp: rs[-1].offset + 1 for tp, rs in batches.items() if rs}
                if offsets:
                    try:
                        await consumer.commit(offsets)
                    except KafkaError as exc:
                        report.emit("error", m=f"commit: {exc!r}")
        finally:
            await consumer.stop()

    asyncio.run(run())


def main(argv: list[str]) -> None:
    warnings.simplefilter("ignore")  # kafka-python's import-time DeprecationWarning
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=CLIENTS)
    for option in ("--bootstrap", "--group", "--topic", "--name"):
        parser.add_argument(option, required=True)
    parser.add_argument("--session-timeout-ms", type=int, required=True)
    parser.add_argument("--instance-id")
    args = parser.parse_args(argv)
    # The clients' own account of joins and errors, for the failure message (explain()).
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    for name in ("kafka.coordinator", "aiokafka.consumer.group_coordinator"):
        logging.getLogger(name).setLevel(logging.INFO)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    report = _Reporter()
    run = {"confluent": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka}
    run[args.client](args, report)
    report.emit("closed", pid=os.getpid())


if __name__ == "__main__":
    main(sys.argv[1:])
