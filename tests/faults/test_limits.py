"""Connections and request memory at their limits, against a real broker process (issue 17).

* Under a 256-descriptor limit (`prlimit --nofile=256:256`), more connections than descriptors:
  the broker logs that accept ran out of descriptors, stays up, and once the connections close a
  new confluent-kafka client is served. Under `--nofile=256:1024` the broker raises its soft
  limit to 1024.
* `max.connections` / `max.connections.per.ip`: the connection over the limit is closed at once
  and logged; a freed slot is usable again.
* `queued.max.request.bytes`: 50 connections each send all but the last byte of a frame just under
  `socket.request.max.bytes`; the broker's peak RSS (VmHWM from /proc, never a timing) stays under
  its baseline + the cap + 50 x 256 KiB + a fixed allowance, and a small client keeps working
  meanwhile. A frame larger than the cap is refused without being buffered.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import time
from pathlib import Path

import pytest
from brokerkit import (
    AckedProducer,
    BrokerProcess,
    MiB,
    RawClient,
    check_all,
    create_topic,
    require_tool,
)

from waiting import poll

TOPIC = "limits"
KiB = 1024


def round_trip(broker: BrokerProcess, topic: str, first_seq: int, count: int = 5) -> None:
    """A fresh confluent-kafka producer and consumer: `count` records acknowledged, read back."""
    producer = AckedProducer(broker.bootstrap, topic, next_seq=first_seq, message_timeout_ms=30_000)
    acked = producer.produce(count)
    assert len(acked) == count, producer.failed
    check_all(broker.bootstrap, topic, acked)


def proc_status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def assert_closed_by_broker(sock: socket.socket, timeout: float = 10.0) -> None:
    """EOF (or a reset) within `timeout`, and no bytes before it."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"the broker left the connection open for {timeout}s")
    assert data == b"", f"expected the broker to close the connection, got {data[:100]!r}"


# ---- descriptors ------------------------------------------------------------------------------


@pytest.mark.slow
def test_more_connections_than_descriptors(tmp_path: Path) -> None:
    prlimit = require_tool("prlimit")
    broker = BrokerProcess(tmp_path / "broker", prefix=[prlimit, "--nofile=256:256"])
    sockets: list[socket.socket] = []
    try:
        broker.start()
        limits = Path(f"/proc/{broker.pid}/limits").read_text()
        assert any(
            line.startswith("Max open files") and line.split()[3:5] == ["256", "256"]
            for line in limits.splitlines()
        ), limits
        create_topic(broker.bootstrap, TOPIC)
        round_trip(broker, TOPIC, 0)

        for _ in range(400):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            code = sock.connect_ex(("127.0.0.1", broker.port))
            assert code in (0, errno.EINPROGRESS), errno.errorcode.get(code, code)
            sockets.append(sock)
        poll(
            lambda: "out of file descriptors" in broker.logs() or "accept failed" in broker.logs(),
            15,
            "a warning that accept ran out of descriptors",
        )
        assert broker.process is not None and broker.process.poll() is None
        open_fds = len(list(Path(f"/proc/{broker.pid}/fd").iterdir()))
        assert open_fds <= 256, open_fds

        for sock in sockets:
            sock.close()
        sockets.clear()
        round_trip(broker, TOPIC, 1000)
        assert broker.process.poll() is None, "the broker exited"
        assert "Traceback" not in broker.logs()
        assert broker.stop() == 0
    finally:
        for sock in sockets:
            sock.close()
        if broker.process is not None:
            broker.kill()


def test_soft_descriptor_limit_raised_to_the_hard_one(tmp_path: Path) -> None:
    prlimit = require_tool("prlimit")
    broker = BrokerProcess(tmp_path / "broker", prefix=[prlimit, "--nofile=256:1024"])
    try:
        broker.start()
        limits = Path(f"/proc/{broker.pid}/limits").read_text()
        (line,) = (x for x in limits.splitlines() if x.startswith("Max open files"))
        assert line.split()[3:5] == ["1024", "1024"], line
        assert broker.stop() == 0
    finally:
        if broker.process is not None:
            broker.kill()


# ---- connection limits -----------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["max.connections.per.ip", "max.connections"])
def test_connections_over_the_limit_are_closed(tmp_path: Path, setting: str) -> None:
    broker = BrokerProcess(tmp_path / "broker", config={setting: 10})
    clients: list[RawClient] = []
    try:
        broker.start()
        for _ in range(10):
            clients.append(RawClient(broker.port))
            assert clients[-1].api_versions().error_code == 0
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as extra:
            assert_closed_by_broker(extra)
        poll(lambda: "refused connection from" in broker.logs(), 5, "the refusal logged")
        assert setting in broker.logs().split("refused connection from", 1)[1].split("\n", 1)[0]
        for client in clients:  # the ten admitted ones are untouched
            assert client.api_versions().error_code == 0

        clients.pop().sock.close()  # a slot frees up once the broker sees the close

        def admitted() -> bool:
            try:
                with RawClient(broker.port, timeout=5) as again:
                    return bool(again.api_versions().error_code == 0)
            except (ConnectionError, OSError):
                return False

        poll(admitted, 10, "a connection admitted after one of the ten closed", interval=0.2)
        assert broker.stop() == 0
    finally:
        for client in clients:
            client.sock.close()
        if broker.process is not None:
            broker.kill()


# ---- request memory --------------------------------------------------------------------------

MAX_REQUEST = 16 * MiB
QUEUED_CAP = 64 * MiB
CONNECTIONS = 50
PER_CONNECTION = 256 * KiB  # a request of this size or less is never held back
ALLOWANCE = 64 * MiB
STALL_S = 3.0  # no byte taken on any connection for this long: the broker reads no more
SEND_LIMIT_S = 60.0


def feed(socks: list[socket.socket], body: memoryview) -> list[int]:
    """Send each socket all of `body` but its last byte, without blocking, until the broker takes
    no more (nothing sent for STALL_S) or everything is sent; bytes sent per socket."""
    sent = [0] * len(socks)
    goal = len(body) - 1
    last_progress = started = time.monotonic()
    while time.monotonic() - last_progress < STALL_S:
        assert time.monotonic() - started < SEND_LIMIT_S, f"still sending after {SEND_LIMIT_S}s"
        progress = False
        for i, sock in enumerate(socks):
            if sent[i] >= goal:
                continue
            with contextlib.suppress(BlockingIOError):
                n = sock.send(body[sent[i] : goal])
                sent[i] += n
                progress = progress or n > 0
        if all(s >= goal for s in sent):
            break
        if progress:
            last_progress = time.monotonic()
        else:
            time.sleep(0.01)
    return sent


@pytest.mark.slow
def test_request_memory_is_bounded(tmp_path: Path) -> None:
    config: dict[str, object] = {
        "socket.request.max.bytes": MAX_REQUEST,
        "queued.max.request.bytes": QUEUED_CAP,
    }
    broker = BrokerProcess(tmp_path / "broker", config=config)
    socks: list[socket.socket] = []
    try:
        broker.start()
        create_topic(broker.bootstrap, TOPIC)
        round_trip(broker, TOPIC, 0)
        baseline = proc_status_kib(broker.pid, "VmHWM") * KiB
        bound = baseline + QUEUED_CAP + CONNECTIONS * PER_CONNECTION + ALLOWANCE

        size = MAX_REQUEST - 100
        body = memoryview(bytes(size))
        for _ in range(CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            sock.sendall(size.to_bytes(4, "big"))
            sock.setblocking(False)
            socks.append(sock)
        sent = feed(socks, body)
        peak = proc_status_kib(broker.pid, "VmHWM") * KiB
        assert peak <= bound, (
            f"peak RSS {peak / MiB:.0f} MiB > bound {bound / MiB:.0f} MiB (baseline "
            f"{baseline / MiB:.0f} MiB; {sum(sent) / MiB:.0f} MiB sent, {CONNECTIONS} connections)"
        )
        held_back = sum(1 for s in sent if s < size - 1)
        assert held_back > 0, "every connection sent its whole frame: nothing was held back"
        round_trip(broker, TOPIC, 1000)  # small requests are never held back
        peak = proc_status_kib(broker.pid, "VmHWM") * KiB
        assert peak <= bound, f"peak RSS {peak / MiB:.0f} MiB > bound {bound / MiB:.0f} MiB"
        assert broker.process is not None and broker.process.poll() is None

        for sock in socks:
            sock.close()
        socks.clear()
        round_trip(broker, TOPIC, 2000)
        assert "Traceback" not in broker.logs()
        assert broker.stop() == 0
    finally:
        for sock in socks:
            sock.close()
        if broker.process is not None:
            broker.kill()


def test_a_frame_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    config: dict[str, object] = {
        "socket.request.max.bytes": 16 * MiB,
        "queued.max.request.bytes": 4 * MiB,
    }
    broker = BrokerProcess(tmp_path / "broker", config=config)
    try:
        broker.start()
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            sock.sendall((8 * MiB).to_bytes(4, "big") + bytes(64 * KiB))
            assert_closed_by_broker(sock)
        poll(lambda: "queued.max.request.bytes" in broker.logs(), 5, "the refusal logged")
        create_topic(broker.bootstrap, TOPIC)
        round_trip(broker, TOPIC, 0)
        assert broker.stop() == 0
    finally:
        if broker.process is not None:
            broker.kill()
