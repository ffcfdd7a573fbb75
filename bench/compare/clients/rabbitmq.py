"""RabbitMQ through pika (AMQP 0-9-1): a durable classic queue or a stream queue, persistent
messages, publisher confirms."""

from __future__ import annotations

import threading
import time
from typing import Any

import pika
from pika.spec import Basic

from . import Run, elapsed_ms, paced, payload, stamped, windows

PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
PREFETCH = 2_000
ACK_EVERY = 500


class RabbitDriver:
    """`stream=False`: a durable classic queue, read with automatic acknowledgement (the broker
    forgets a message once sent; the cheapest way to read a classic queue). `stream=True`: a
    stream queue, which RabbitMQ reads only with manual acknowledgement and a prefetch limit."""

    def __init__(self, port: int, *, stream: bool) -> None:
        self.params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)
        self.stream = stream
        self.arguments = {"x-queue-type": "stream"} if stream else {}
        consume = (
            {
                "prefetch_count": PREFETCH,
                "ack": f"manual, multiple, every {ACK_EVERY}",
                "x-stream-offset": "first",
            }
            if stream
            else {"ack": "automatic (no-ack)"}
        )
        self.settings: dict[str, Any] = {
            "client": f"pika {pika.__version__}",
            "queue": {"durable": True, **self.arguments},
            "publish": {
                "delivery_mode": 2,
                "publisher confirms": True,
                "connection": "SelectConnection (asynchronous)",
                "window": "publish N, wait for all N confirms",
                "pipelined": "publish while fewer than the workload's in_flight (recorded with "
                "it) are unconfirmed; each confirm or nack, single or multiple (every tag up to "
                "it), frees room for as many as it settles; nacks counted as failures",
            },
            "consume": consume,
            "latency publisher": "BlockingConnection, confirm each message",
        }

    def prepare(self, name: str) -> None:
        with pika.BlockingConnection(self.params) as connection:
            connection.channel().queue_declare(name, durable=True, arguments=self.arguments)

    def drop(self, name: str) -> None:
        with pika.BlockingConnection(self.params) as connection:
            connection.channel().queue_delete(name)

    def produce(self, name: str, count: int, size: int, batch: int, deadline: float) -> Run:
        publisher = _WindowedPublisher(self.params, name, payload(size), count, batch, deadline)
        return publisher.run()

    def pipelined(self, name: str, count: int, size: int, in_flight: int, deadline: float) -> Run:
        publisher = _PipelinedPublisher(
            self.params, name, payload(size), count, in_flight, deadline
        )
        return publisher.run()

    def _consume_channel(self, connection: pika.BlockingConnection) -> Any:
        channel = connection.channel()
        if self.stream:
            channel.basic_qos(prefetch_count=PREFETCH)
        return channel

    def consume(self, name: str, expected: int, deadline: float) -> Run:
        with pika.BlockingConnection(self.params) as connection:
            channel = self._consume_channel(connection)
            got = 0
            started = time.perf_counter()
            for method, _props, _body in self._messages(channel, name):
                if method is not None:
                    got += 1
                    self._ack(channel, method, got)
                if got >= expected or time.monotonic() > deadline:
                    break
            seconds = time.perf_counter() - started
            channel.cancel()
        return Run(got, seconds)

    def _messages(self, channel: Any, name: str) -> Any:
        if self.stream:
            return channel.consume(
                name, arguments={"x-stream-offset": "first"}, inactivity_timeout=0.5
            )
        return channel.consume(name, auto_ack=True, inactivity_timeout=0.5)

    def _ack(self, channel: Any, method: Any, got: int) -> None:
        if self.stream and got % ACK_EVERY == 0:
            channel.basic_ack(method.delivery_tag, multiple=True)

    def latency(self, name: str, rate: int, seconds: float) -> list[float]:
        samples: list[float] = []
        total = int(rate * seconds)
        stop = threading.Event()
        subscribed = threading.Event()

        def receive() -> None:
            with pika.BlockingConnection(self.params) as connection:
                channel = self._consume_channel(connection)
                messages = self._messages(channel, name)
                subscribed.set()
                for method, _props, body in messages:
                    if method is not None:
                        samples.append(elapsed_ms(body))
                        self._ack(channel, method, len(samples))
                    if len(samples) >= total or stop.is_set():
                        break
                channel.cancel()

        receiver = threading.Thread(target=receive)
        receiver.start()
        subscribed.wait(30)
        try:
            with pika.BlockingConnection(self.params) as connection:
                channel = connection.channel()
                channel.confirm_delivery()
                for _ in paced(rate, seconds):
                    channel.basic_publish("", name, stamped(200), PERSISTENT)
            receiver.join(timeout=10)
        finally:
            stop.set()
            receiver.join()
        return samples


class _Publisher:
    """A publisher on an asynchronous connection with publisher confirms: the ioloop runs until
    the subclass closes the connection, and `run` returns what was confirmed."""

    def __init__(self, params: pika.ConnectionParameters, queue: str, body: bytes) -> None:
        self.queue, self.body = queue, body
        self.published = self.confirmed = self.nacked = 0
        self.started = self.finished = 0.0
        self.error: str | None = None
        self.connection = pika.SelectConnection(
            params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_error,
            on_close_callback=self._on_closed,
        )

    def run(self) -> Run:
        self.connection.ioloop.start()
        if self.error is not None:
            raise RuntimeError(f"rabbitmq publish failed: {self.error}")
        return Run(self.confirmed, self.finished - self.started, failed=self.nacked)

    def _on_open(self, connection: Any) -> None:
        connection.channel(on_open_callback=self._on_channel)

    def _on_error(self, _connection: Any, error: Any) -> None:
        self.error = str(error)
        self.connection.ioloop.stop()

    def _on_closed(self, _connection: Any, reason: Any) -> None:
        if self.finished == 0.0 and self.error is None:
            self.error = str(reason)
        self.connection.ioloop.stop()

    def _on_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.confirm_delivery(self._on_confirm, callback=self._on_confirm_mode)

    def _on_confirm_mode(self, _frame: Any) -> None:
        self.started = time.perf_counter()
        self._send()

    def _publish(self) -> None:
        self.published += 1
        self.channel.basic_publish("", self.queue, self.body, PERSISTENT)

    def _finish(self) -> None:
        self.finished = time.perf_counter()
        self.connection.close()

    def _send(self) -> None:
        raise NotImplementedError

    def _on_confirm(self, frame: Any) -> None:
        raise NotImplementedError


class _WindowedPublisher(_Publisher):
    """Publishes `count` messages in windows of `batch`: a window goes out, and the next follows
    once the broker has confirmed every message in it."""

    def __init__(
        self,
        params: pika.ConnectionParameters,
        queue: str,
        body: bytes,
        count: int,
        batch: int,
        deadline: float,
    ) -> None:
        self.windows = windows(count, batch, deadline)
        self.pending: set[int] = set()
        super().__init__(params, queue, body)

    def _send(self) -> None:
        n = next(self.windows, 0)
        if n == 0:
            self._finish()
            return
        for _ in range(n):
            self._publish()
            self.pending.add(self.published)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        if isinstance(method, Basic.Nack):
            self.error = f"nack for delivery tag {method.delivery_tag}"
            self.connection.close()
            return
        done = (
            {t for t in self.pending if t <= method.delivery_tag}
            if method.multiple
            else {method.delivery_tag}
        )
        self.confirmed += len(done & self.pending)
        self.pending -= done
        if not self.pending:
            self._send()


class _PipelinedPublisher(_Publisher):
    """Publishes `count` messages keeping up to `in_flight` unconfirmed: every confirm (or
    nack), single or multiple, makes room for as many new messages as it settles. A nack counts
    as a failed message. Ends at the last confirm once every message is out, or at the first
    confirm after `deadline` with everything sent by then settled."""

    def __init__(
        self,
        params: pika.ConnectionParameters,
        queue: str,
        body: bytes,
        count: int,
        in_flight: int,
        deadline: float,
    ) -> None:
        self.count, self.in_flight, self.deadline = count, in_flight, deadline
        self.settled = _Settled()
        self.sending = True
        super().__init__(params, queue, body)

    def _send(self) -> None:
        if self.sending and (self.published >= self.count or time.monotonic() > self.deadline):
            self.sending = False
        if self.sending:
            room = min(
                self.in_flight - (self.published - self.settled.count), self.count - self.published
            )
            for _ in range(room):
                self._publish()
        elif self.settled.count >= self.published:
            self._finish()

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        settled = self.settled.settle(method.delivery_tag, multiple=method.multiple)
        if isinstance(method, Basic.Nack):
            self.nacked += settled
        else:
            self.confirmed += settled
        self._send()


class _Settled:
    """Which of the delivery tags 1, 2, 3, ... a channel has settled, without a set of them all:
    every tag below `low` is settled, and `above` holds those settled singly beyond it (none
    while the broker confirms in order)."""

    def __init__(self) -> None:
        self.low = 1
        self.above: set[int] = set()
        self.count = 0

    def settle(self, tag: int, *, multiple: bool) -> int:
        """Marks `tag` (and with `multiple`, every tag up to it) settled; returns how many tags
        were not settled before."""
        if multiple:
            if tag < self.low:
                return 0
            beyond = {t for t in self.above if t <= tag}
            newly = tag - self.low + 1 - len(beyond)
            self.above -= beyond
            self.low = tag + 1
        else:
            if tag < self.low or tag in self.above:
                return 0
            self.above.add(tag)
            newly = 1
        while self.low in self.above:
            self.above.remove(self.low)
            self.low += 1
        self.count += newly
        return newly
