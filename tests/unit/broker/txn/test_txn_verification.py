"""KIP-890's check on a partition leader whose producers' coordinator is another broker: the
leader asks that coordinator (AddPartitionsToTxn v4 over a real socket, answered here by a real
TransactionCoordinator) once per partition of a transaction, batches what arrives while a
question is in flight, and refuses batches of partitions not in the transaction or whose
transaction a marker ended meanwhile."""

from __future__ import annotations

import asyncio
import datetime
import struct
from typing import Any

from kio.schema.add_partitions_to_txn.v4 import response as add_response
from kio.schema.errors import ErrorCode
from txn_harness import TxnWorld

from weir.broker.txn.coordinator import InitResult, TransactionCoordinator
from weir.broker.txn.verification import TransactionVerifier, VerificationGuards, produce_error
from weir.protocol.codec import decode_request, encode_response
from weir.records import BatchSpec, Record, build_batch

_SIZE = struct.Struct(">i")


class RemoteCoordinator:
    """Another broker's side of verification: AddPartitionsToTxn v4 on a socket, answered by
    `coordinator`; `gate`, when set, holds every answer until it is opened."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator
        self.requests: list[list[str]] = []  # the transactional ids of each request
        self.gate: asyncio.Event | None = None
        self.received = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[:2]

    async def stop(self) -> None:
        for writer in self._writers:
            writer.close()
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
                request = decode_request(await reader.readexactly(size), {24: (4, 4)})
                self.requests.append([t.transactional_id for t in request.body.transactions])
                self.received.set()
                if self.gate is not None:
                    await self.gate.wait()
                writer.write(encode_response(24, 4, request.correlation_id, self._answer(request)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _answer(self, request: Any) -> Any:
        results = []
        for txn in request.body.transactions:
            asked = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
            answers = self.coordinator.verify_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, asked
            )
            topics = {}
            for (topic, index), error in answers.items():
                topics.setdefault(topic, []).append(add_response.AddPartitionsToTxnPartitionResult(
                    partition_index=index, partition_error_code=error))  # fmt: skip
            results.append(add_response.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id,
                topic_results=tuple(add_response.AddPartitionsToTxnTopicResult(
                    name=name, results_by_partition=tuple(r)) for name, r in topics.items()),
            ))  # fmt: skip
        return add_response.AddPartitionsToTxnResponse(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
            results_by_transaction=tuple(results),
        )  # fmt: skip


def _batch(producer: InitResult, sequence: int) -> bytes:
    record = Record(offset=0, timestamp=0, key=None, value=b"x")
    return build_batch([record], spec=BatchSpec(
        producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
        base_sequence=sequence, transactional=True))  # fmt: skip


def _verifier(world: TxnWorld, address: tuple[str, int], **options: Any) -> TransactionVerifier:
    """A leader (node 1) whose transactional ids are all coordinated at `address` (node 2)."""
    return TransactionVerifier(None, world.replicas, VerificationGuards(), node_id=1,
                               coordinator_of=lambda _: (2, address), **options)  # fmt: skip


def test_one_question_per_partition_of_a_transaction(world: TxnWorld) -> None:
    async def run() -> None:
        remote = RemoteCoordinator(world.coordinator)
        verifier = _verifier(world, await remote.start())
        producer = await world.init()
        [(error, _)] = (await verifier.verify("t", [("orders", 0, _batch(producer, 0))])).values()
        assert error is ErrorCode.invalid_txn_state  # not added to the transaction
        assert await world.add(producer, ("orders", 0), ("orders", 1)) is ErrorCode.none
        first = [("orders", 0, _batch(producer, 0)), ("orders", 1, _batch(producer, 0))]
        assert await verifier.verify("t", first) == {}
        assert len(remote.requests) == 2  # both partitions in one question
        for topic, index, records in first:
            assert world.replicas.append(topic, index, records).error is ErrorCode.none
        later = [("orders", 0, _batch(producer, 1)), ("orders", 1, _batch(producer, 1))]
        assert await verifier.verify("t", later) == {}
        assert len(remote.requests) == 2  # open there already: not asked again
        assert await verifier.verify(None, later) == {
            tp: (ErrorCode.invalid_txn_state, "a transactional batch without a transactional id")
            for tp in [("orders", 0), ("orders", 1)]
        }  # fmt: skip
        verifier.close()
        await remote.stop()

    asyncio.run(run())


def test_questions_that_arrive_while_one_is_in_flight_go_together(world: TxnWorld) -> None:
    async def run() -> None:
        remote = RemoteCoordinator(world.coordinator)
        verifier = _verifier(world, await remote.start())
        producers = {}
        for txn_id in ("a", "b", "c"):
            producers[txn_id] = await world.init(txn_id)
            await world.add(producers[txn_id], ("payments", 0), txn_id=txn_id)
        remote.gate = asyncio.Event()

        def ask(txn_id: str) -> asyncio.Task[Any]:
            batch = [("payments", 0, _batch(producers[txn_id], 0))]
            return asyncio.create_task(verifier.verify(txn_id, batch))

        first = ask("a")
        await remote.received.wait()
        rest = [ask("b"), ask("c")]
        await asyncio.sleep(0.05)
        remote.gate.set()
        assert await asyncio.gather(first, *rest) == [{}, {}, {}]
        assert remote.requests == [["a"], ["b", "c"]]
        verifier.close()
        await remote.stop()

    asyncio.run(run())


def test_a_marker_written_during_the_question_refuses_the_batch(world: TxnWorld) -> None:
    async def run() -> None:
        remote = RemoteCoordinator(world.coordinator)
        verifier = _verifier(world, await remote.start())
        producer = await world.init()
        await world.add(producer, ("orders", 2))
        remote.gate = asyncio.Event()
        asked = asyncio.create_task(verifier.verify("t", [("orders", 2, _batch(producer, 0))]))
        await remote.received.wait()
        verifier.guards.marker_written(producer.producer_id, [("orders", 2)])
        remote.gate.set()
        [(error, message)] = (await asked).values()
        assert (error, message) == (ErrorCode.invalid_txn_state, "the transaction ended meanwhile")
        verifier.close()
        await remote.stop()

    asyncio.run(run())


def test_an_unreachable_coordinator_is_retriable_and_verification_can_be_off(
    world: TxnWorld,
) -> None:
    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()[:2]
        server.close()
        await server.wait_closed()
        producer = await world.init()
        batch = [("orders", 0, _batch(producer, 0))]
        verifier = _verifier(world, address)
        [(error, _)] = (await verifier.verify("t", batch)).values()
        assert error is ErrorCode.not_enough_replicas
        verifier.close()
        assert await _verifier(world, address, enabled=False).verify("t", batch) == {}

    asyncio.run(run())


def test_coordinator_answers_become_what_producers_expect() -> None:
    assert produce_error(ErrorCode.none) == (ErrorCode.none, "")
    assert produce_error(ErrorCode.producer_fenced)[0] is ErrorCode.invalid_producer_epoch
    for busy in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                 ErrorCode.concurrent_transactions, ErrorCode.network_exception):  # fmt: skip
        assert produce_error(busy)[0] is ErrorCode.not_enough_replicas
    assert produce_error(ErrorCode.invalid_txn_state)[0] is ErrorCode.invalid_txn_state
    mapping = ErrorCode.invalid_producer_id_mapping
    assert produce_error(mapping)[0] is mapping


def test_the_coordinator_answers_a_leaders_question(world: TxnWorld) -> None:
    async def run() -> None:
        producer = await world.init()
        await world.add(producer, ("orders", 0))
        asked = [("orders", 0), ("orders", 1)]
        verify = world.coordinator.verify_partitions
        pid, epoch = producer.producer_id, producer.producer_epoch
        assert verify("t", pid, epoch, asked) == {
            ("orders", 0): ErrorCode.none, ("orders", 1): ErrorCode.invalid_txn_state}  # fmt: skip
        assert set(verify("t", pid, epoch + 1, asked).values()) == {ErrorCode.producer_fenced}
        assert set(verify("t", pid + 1, epoch, asked).values()) == {
            ErrorCode.invalid_producer_id_mapping}  # fmt: skip
        assert set(verify("nobody", pid, epoch, asked).values()) == {
            ErrorCode.invalid_producer_id_mapping}  # fmt: skip
        world.markers.gate = asyncio.Event()
        assert await world.end(producer, commit=True) is ErrorCode.none  # PrepareCommit
        assert set(verify("t", pid, epoch, asked).values()) == {ErrorCode.concurrent_transactions}
        world.markers.gate.set()
        await world.coordinator.settle()
        assert set(verify("t", pid, epoch, asked).values()) == {ErrorCode.invalid_txn_state}

    asyncio.run(run())
