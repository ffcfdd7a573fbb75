"""The replication throttle of a reassignment, as kafka-reassign-partitions.sh sets and clears
it.

`execute --throttle B` lists, on each moving topic, the replicas a move copies from
(`leader.replication.throttled.replicas`: every current replica of a moving partition, any of
which may lead it) and the replicas it adds (`follower.replication.throttled.replicas`), then
sets `leader.replication.throttled.rate` and `follower.replication.throttled.rate` to B bytes a
second on every broker a move touches; `--replica-alter-log-dirs-throttle B` sets
`replica.alter.log.dirs.io.max.bytes.per.second` on them. Replicas in sync are never held, so
the throttle slows only the copying.

`verify` clears them once every move of the file is complete: the broker rates on every broker
of the cluster, and the two topic lists on the file's topics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

TopicPartition = tuple[str, int]
#: IncrementalAlterConfigs' resource types and operations
TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_RATES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)

#: one config change: (name, value, operation)
Change = tuple[str, str | None, int]


class ConfigTarget(Protocol):
    def alter_configs(
        self, resource_type: int, name: str, changes: list[Change], broker: int | None
    ) -> str | None:
        """Apply `changes` to a resource (sent to `broker`, or any); an error line or None."""
        ...


@dataclass(frozen=True, slots=True)
class ThrottlePlan:
    """What `execute --throttle` writes: per topic, its (leader, follower) throttled replicas;
    and the brokers that get the rates."""

    topics: Mapping[str, tuple[str, str]]
    brokers: tuple[int, ...]


def throttle_plan(
    plan: Mapping[TopicPartition, tuple[int, ...]],
    current: Mapping[TopicPartition, Iterable[int]],
) -> ThrottlePlan:
    """The throttled replicas of moving `plan`'s partitions from their `current` replicas (for a
    partition already moving: its replicas now, the ones being added among them)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (topic, index), target in sorted(plan.items()):
        existing = list(current.get((topic, index), ()))
        if list(target) == existing:
            continue
        adding = [r for r in target if r not in existing]
        leaders.setdefault(topic, []).extend(f"{index}:{r}" for r in existing)
        followers.setdefault(topic, []).extend(f"{index}:{r}" for r in adding)
        brokers.update(existing, target)
    topics = {t: (",".join(leaders[t]), ",".join(followers.get(t, []))) for t in leaders}
    return ThrottlePlan(topics, tuple(sorted(brokers)))


def check_rate(flag: str, value: int | None) -> None:
    """A throttle must be a positive number of bytes a second."""
    if value is not None and value <= 0:
        raise SystemExit(f"weir: {flag} must be a positive number of bytes a second, not {value}")


def apply_throttle(
    target: ConfigTarget, throttle: ThrottlePlan, rate: int | None, log_dirs_rate: int | None
) -> list[str]:
    """Write the topics' throttled replicas, then the brokers' rates; the error lines."""
    errors = []
    if rate is not None:
        for topic, (leader, follower) in sorted(throttle.topics.items()):
            changes: list[Change] = [(LEADER_REPLICAS, leader, SET)]
            changes.append((FOLLOWER_REPLICAS, follower, SET) if follower
                           else (FOLLOWER_REPLICAS, None, DELETE))  # fmt: skip
            error = target.alter_configs(TOPIC, topic, changes, None)
            if error:
                errors.append(f"topic {topic}: {error}")
    rates: list[Change] = []
    if rate is not None:
        rates += [(LEADER_RATE, str(rate), SET), (FOLLOWER_RATE, str(rate), SET)]
    if log_dirs_rate is not None:
        rates.append((LOG_DIRS_RATE, str(log_dirs_rate), SET))
    if rates:
        for broker in throttle.brokers:
            error = target.alter_configs(BROKER, str(broker), rates, broker)
            if error:
                errors.append(f"broker {broker}: {error}")
    return errors


def clear_throttles(
    target: ConfigTarget, topics: Iterable[str], brokers: Iterable[int]
) -> list[str]:
    """Remove the rates from `brokers` and the throttled replicas from `topics`; error lines."""
    errors = []
    for broker in sorted(brokers):
        changes: list[Change] = [(name, None, DELETE) for name in BROKER_RATES]
        error = target.alter_configs(BROKER, str(broker), changes, broker)
        if error:
            errors.append(f"broker {broker}: {error}")
    for topic in sorted(set(topics)):
        changes = [(LEADER_REPLICAS, None, DELETE), (FOLLOWER_REPLICAS, None, DELETE)]
        error = target.alter_configs(TOPIC, topic, changes, None)
        if error:
            errors.append(f"topic {topic}: {error}")
    return errors
