"""Agent settings: a TOML file, overridden by command-line flags.

Example::

    bootstrap_server = "localhost:9092"
    spool = "/var/spool/weir-agent"
    socket = "/run/weir-agent.sock"
    default_durability = "events"      # or "logs", "memory", "shm"
    delivery_guarantee = "at-least-once"  # or "exactly-once" (see weir.agent.exactly_once)
    queue_bytes = 67108864             # ring size of each topic-partition queue
    max_event_bytes = 1048576
    group_commit_ms = 0.5              # events: how long a flush leader waits for company
    flush_interval_ms = 1000           # logs: msync interval
    full_timeout_ms = 0                # events: how long a caller waits on a full queue
    metadata_refresh_ms = 30000
    metadata_wait_ms = 1000            # longest a caller waits for a never-seen topic's metadata
    shutdown_timeout_ms = 5000         # SIGTERM: stop, flush and close within this time
    metrics_port = 9464                # Prometheus metrics on http://metrics_host:PORT/metrics
    metrics_host = "0.0.0.0"
    shm_dir = "/dev/shm/weir-agent"    # where `shm` queues live (default: one directory per spool)
    tail_poll_ms = 200                 # how often tailed files are checked
    tail_close_renamed_ms = 5000       # a rotated file idle this long is closed
    formats = ["/etc/weir/formats"]    # format files or directories besides the shipped ones
    [topics.clicks]
    durability = "logs"

    [producer]                         # librdkafka settings of the agent's producer
    "security.protocol" = "SASL_SSL"   # security: librdkafka's names (see below)
    "ssl.ca.location" = "/etc/weir/ca.pem"
    "sasl.mechanism" = "SCRAM-SHA-512"
    "sasl.username" = "agent"
    "sasl.password" = "agent-secret"

    [[inputs]]                         # tail files into a topic (see weir.agent.tail)
    paths = ["/var/log/app/*.log"]
    topic = "app-logs"
    key = "apache"                     # optional: the lines' record key, a log format's name

`delivery_guarantee` applies to the disk classes (`events`, `logs`); `memory` and `shm` queues
are at-least-once whatever it says (their positions do not survive a restart of the host).
Exactly-once needs the cluster to allow the agent transactions: ACLs granting WRITE and DESCRIBE
on the transactional ids `weir-agent.<agent id>.*` (the agent id is in `<spool>/agent.id`).

Tailed topics default to the `logs` class unless `[topics.<topic>]` names another. An input's
`key` must name a registered log format (the shipped ones and those of `formats`): the agent
refuses to start otherwise (see `weir.agent.input_formats`).
`[producer]` takes any librdkafka setting; its metadata requests and deliveries use them all.
Security settings are read as every weir client reads them (`weir.protocol.client_settings`:
a Java client's `sasl.jaas.config` too); `weir agent start --command-config FILE -X KEY=VALUE`
adds to them. Passwords are never shown (`weir agent status` lists the security settings with
secrets hidden).
"""

from __future__ import annotations

import enum
import hashlib
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from weir.agent.queue import Durability
from weir.agent.tail import TailInput, parse_inputs
from weir.agent.wire import DEFAULT_SOCKET
from weir.protocol.client_settings import client_settings, is_security_setting, redacted


class DeliveryGuarantee(enum.Enum):
    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    bootstrap_server: str = field(
        default_factory=lambda: os.environ.get("WEIR_BOOTSTRAP", "localhost:9092")
    )
    spool: Path = Path("weir-agent-spool")
    socket: Path = Path(DEFAULT_SOCKET)
    default_durability: Durability = Durability.EVENTS
    topic_durability: dict[str, Durability] = field(default_factory=dict)
    delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.AT_LEAST_ONCE
    queue_bytes: int = 64 << 20
    max_event_bytes: int = 1 << 20
    group_commit_ms: float = 0.5
    flush_interval_ms: int = 1000
    full_timeout_ms: int = 0
    metadata_refresh_ms: int = 30_000
    metadata_wait_ms: int = 1000
    shutdown_timeout_ms: int = 5000
    producer: dict[str, Any] = field(default_factory=dict)
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"
    shm_dir: Path | None = None
    inputs: tuple[TailInput, ...] = ()
    tail_poll_ms: int = 200
    tail_close_renamed_ms: int = 5000
    formats: tuple[Path, ...] = ()  # log format files or directories, for the inputs' keys

    def durability(self, topic: str) -> Durability:
        if topic in self.topic_durability:
            return self.topic_durability[topic]
        if any(source.topic == topic for source in self.inputs):
            return Durability.LOGS
        return self.default_durability

    def shared_memory_directory(self) -> Path:
        """Where `shm` queues live: `shm_dir`, or a directory of /dev/shm named after the spool."""
        if self.shm_dir is not None:
            return self.shm_dir
        digest = hashlib.sha1(str(self.spool.resolve()).encode()).hexdigest()[:16]
        return Path("/dev/shm") / f"weir-agent-{digest}"

    def security(self) -> dict[str, Any]:
        """The producer's security settings, fit to show: secrets hidden."""
        return redacted({k: v for k, v in self.producer.items() if is_security_setting(k)})

    def with_overrides(self, **overrides: Any) -> AgentConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def load_config(path: Path | None) -> AgentConfig:
    if path is None:
        return AgentConfig()
    raw = tomllib.loads(path.read_text())
    topics = raw.pop("topics", {})
    inputs = parse_inputs(raw.pop("inputs", []))
    formats = tuple(Path(entry) for entry in raw.pop("formats", []))
    known = {f.name for f in fields(AgentConfig)}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown agent settings: {', '.join(sorted(unknown))}")
    for name in ("spool", "socket", "shm_dir"):
        if name in raw:
            raw[name] = Path(raw[name])
    if "producer" in raw:
        raw["producer"] = client_settings(raw["producer"])
    if "delivery_guarantee" in raw:
        raw["delivery_guarantee"] = DeliveryGuarantee(raw["delivery_guarantee"])
    if "default_durability" in raw:
        raw["default_durability"] = Durability(raw["default_durability"])
    durabilities = {t: Durability(s["durability"]) for t, s in topics.items()}
    return AgentConfig(topic_durability=durabilities, inputs=inputs, formats=formats, **raw)
