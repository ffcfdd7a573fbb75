"""The options of the ``weir`` source and sink, as Spark's Kafka source spells them.

Parsed and checked once on the driver; the parsed value is pickled to the executors.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from weir.pipeline.offsets import OffsetOptionError
from weir.protocol.client_settings import ClientSettingsError, options_client_settings


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    """The source's options, checked once on the driver."""

    client: dict[str, str]
    topics: tuple[str, ...] | None
    pattern: str | None
    starting: str | None
    starting_timestamp_ms: int | None
    ending: str | None
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int
    max_records_per_trigger: int | None
    poll_timeout_s: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        lowered = {k.lower(): v for k, v in options.items()}
        subscribe, pattern = lowered.get("subscribe"), lowered.get("subscribepattern")
        if (subscribe is None) == (pattern is None):
            raise OffsetOptionError("set exactly one of the options subscribe, subscribePattern")
        return cls(
            client=client_options(options),
            topics=tuple(t.strip() for t in subscribe.split(",") if t.strip())
            if subscribe
            else None,
            pattern=pattern,
            starting=lowered.get("startingoffsets"),
            starting_timestamp_ms=_positive(lowered, "startingTimestamp", minimum=0),
            ending=lowered.get("endingoffsets"),
            fail_on_data_loss=flag(lowered.get("failondataloss"), default=True),
            include_headers=flag(lowered.get("includeheaders"), default=True),
            min_partitions=_positive(lowered, "minPartitions") or os.cpu_count() or 1,
            max_records_per_trigger=_positive(lowered, "maxRecordsPerTrigger"),
            poll_timeout_s=(_positive(lowered, "pollTimeoutMs") or 120_000) / 1000,
        )


def client_options(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings: ``bootstrap.servers``, the security settings by librdkafka's names
    (``security.protocol``, ``ssl.*``, ``sasl.*``) and every ``kafka.``-prefixed option (as
    Spark's Kafka source takes them: ``kafka.security.protocol``), read as every weir client
    reads them (`weir.protocol.client_settings`)."""
    try:
        client = {k: str(v) for k, v in options_client_settings(options).items()}
    except ClientSettingsError as exc:
        raise OffsetOptionError(str(exc)) from None
    servers = next((v for k, v in options.items() if k.lower() == "bootstrap.servers"), None)
    if servers is not None:
        client["bootstrap.servers"] = servers
    if "bootstrap.servers" not in client:
        raise OffsetOptionError("the option bootstrap.servers is required")
    return client


def flag(value: str | None, *, default: bool) -> bool:
    """``true`` / ``false`` in any case; ``default`` when the option is not set."""
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OffsetOptionError(f"expected true or false, got {value!r}")
    return value.strip().lower() == "true"


def _positive(lowered: Mapping[str, str], option: str, *, minimum: int = 1) -> int | None:
    text = lowered.get(option.lower())
    if text is None or not text.strip():
        return None
    try:
        value = int(text)
    except ValueError:
        raise OffsetOptionError(f"{option}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise OffsetOptionError(f"{option}: must be at least {minimum}, got {value}")
    return value
