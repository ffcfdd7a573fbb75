"""The systems under comparison: how each is started, driven, and how durable its ack is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .clients import Driver
from .report import ACK_FIRST, FSYNC_FIRST
from .servers import Children, Server, start_nats, start_rabbitmq, start_redis, start_weir


@dataclass(frozen=True, slots=True, kw_only=True)
class System:
    key: str
    label: str
    durability: str
    durability_class: str
    server: str  # systems with the same server share one running instance
    driver: Callable[[Server], Driver]


def _weir(config: dict[str, str]) -> Callable[[Server], Driver]:
    from .clients.weir_kafka import WeirDriver

    return lambda server: WeirDriver(server.port, config)


def _rabbit(stream: bool) -> Callable[[Server], Driver]:
    from .clients.rabbitmq import RabbitDriver

    return lambda server: RabbitDriver(server.port, stream=stream)


def _nats(server: Server) -> Driver:
    from .clients.nats_jetstream import NatsDriver

    return NatsDriver(server.port)


def _redis(server: Server) -> Driver:
    from .clients.redis_streams import RedisDriver

    return RedisDriver(server.port)


SYSTEMS = (
    System(
        key="weir",
        label="weir",
        durability="page cache (OS writeback), replicated=no",
        durability_class=ACK_FIRST,
        server="weir",
        driver=_weir({}),
    ),
    System(
        key="weir-fsync",
        label="weir flush.messages=1",
        durability="fsync per append before ack, replicated=no",
        durability_class=FSYNC_FIRST,
        server="weir",
        driver=_weir({"flush.messages": "1"}),
    ),
    System(
        key="rabbitmq-classic",
        label="RabbitMQ classic queue",
        durability="fsync before confirm (persistent, durable queue), replicated=no",
        durability_class=FSYNC_FIRST,
        server="rabbitmq",
        driver=_rabbit(False),
    ),
    System(
        key="rabbitmq-stream",
        label="RabbitMQ stream queue",
        durability="page cache (streams do not fsync), replicated=no",
        durability_class=ACK_FIRST,
        server="rabbitmq",
        driver=_rabbit(True),
    ),
    System(
        key="nats-jetstream",
        label="NATS JetStream (file)",
        durability="page cache (file store, periodic fsync), replicated=no",
        durability_class=ACK_FIRST,
        server="nats",
        driver=_nats,
    ),
    System(
        key="redis-everysec",
        label="Redis Streams, AOF everysec",
        durability="fsync every 1 s (appendfsync everysec), replicated=no",
        durability_class=ACK_FIRST,
        server="redis-everysec",
        driver=_redis,
    ),
    System(
        key="redis-always",
        label="Redis Streams, AOF always",
        durability="fsync before reply (appendfsync always), replicated=no",
        durability_class=FSYNC_FIRST,
        server="redis-always",
        driver=_redis,
    ),
)

SERVERS: dict[str, Callable[[Children, Path], Server]] = {
    "weir": start_weir,
    "rabbitmq": start_rabbitmq,
    "nats": start_nats,
    "redis-everysec": lambda children, scratch: start_redis(children, scratch, "everysec"),
    "redis-always": lambda children, scratch: start_redis(children, scratch, "always"),
}
PACKAGES = {
    "rabbitmq": "rabbitmq-server",
    "nats": "nats-server",
    "redis-everysec": "redis-server",
    "redis-always": "redis-server",
}
