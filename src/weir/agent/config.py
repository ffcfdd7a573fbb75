"""Agent settings: a TOML file, overridden by command-line flags.

Example::

    bootstrap_server = "localhost:9092"
    spool = "/var/spool/weir-agent"
    socket = "/run/weir-agent.sock"
    default_durability = "events"      # or "logs"
    queue_bytes = 67108864             # ring size of each topic-partition queue
    max_event_bytes = 1048576
    group_commit_ms = 0.5              # events: how long a flush leader waits for company
    flush_interval_ms = 1000           # logs: msync interval
    full_timeout_ms = 0                # events: how long a caller waits on a full queue
    metadata_refresh_ms = 30000
    [topics.clicks]
    durability = "logs"
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from weir.agent.queue import Durability

DEFAULT_SOCKET = "/tmp/weir-agent.sock"


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    bootstrap_server: str = field(
        default_factory=lambda: os.environ.get("WEIR_BOOTSTRAP", "localhost:9092")
    )
    spool: Path = Path("weir-agent-spool")
    socket: Path = Path(DEFAULT_SOCKET)
    default_durability: Durability = Durability.EVENTS
    topic_durability: dict[str, Durability] = field(default_factory=dict)
    queue_bytes: int = 64 << 20
    max_event_bytes: int = 1 << 20
    group_commit_ms: float = 0.5
    flush_interval_ms: int = 1000
    full_timeout_ms: int = 0
    metadata_refresh_ms: int = 30_000
    producer: dict[str, Any] = field(default_factory=dict)

    def durability(self, topic: str) -> Durability:
        return self.topic_durability.get(topic, self.default_durability)

    def with_overrides(self, **overrides: Any) -> AgentConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def load_config(path: Path | None) -> AgentConfig:
    if path is None:
        return AgentConfig()
    raw = tomllib.loads(path.read_text())
    topics = raw.pop("topics", {})
    known = {f.name for f in fields(AgentConfig)}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown agent settings: {', '.join(sorted(unknown))}")
    for name in ("spool", "socket"):
        if name in raw:
            raw[name] = Path(raw[name])
    if "default_durability" in raw:
        raw["default_durability"] = Durability(raw["default_durability"])
    durabilities = {t: Durability(s["durability"]) for t, s in topics.items()}
    return AgentConfig(topic_durability=durabilities, **raw)
