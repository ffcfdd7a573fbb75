"""`weir pipeline logs --config FILE`: the job's settings from a TOML file, its flags overriding it.

The file names each setting as Kafka's clients or Spark's Kafka source and streaming writer
spell it::

    "bootstrap.servers" = "broker-1:9092"
    subscribe = "raw-logs"                 # --topic
    warehouse = "/data/warehouse"
    checkpointLocation = "/data/checkpoints/logs"
    maxRecordsPerTrigger = 1000000
    "metrics.topic" = "raw-logs.metrics"
    "spark.master" = "local[*]"
    "spark.driver.memory" = "2g"
    once = false
    formats = ["formats/", "/etc/weir/orders.toml"]
    dedupe = "agent"                       # or "FIELD[,FIELD...]:POSITION"
    "dedupe.window" = "7d"
    output = "iceberg"                     # or "parquet", the default
    "iceberg.catalog.uri" = "postgresql+psycopg://weir:secret@db/iceberg"
    "iceberg.namespace" = "weir"

Relative paths (warehouse, checkpointLocation, formats) are read from the file's directory. A
flag given on the command line wins over the file; a list flag (``--formats``) replaces the
file's list. An unknown name, or a value of the wrong type, is refused naming the file and the
setting.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.cli.clients import DEFAULT_BOOTSTRAP

OUTPUTS = ("parquet", "iceberg")
DEFAULT_NAMESPACE = "weir"


class PipelineConfigError(ValueError):
    """A config file that cannot be read, or a setting it or the flags get wrong."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its name in the file, the flag's destination, how the file's value is read
    (given the file's directory), and its default (None: required, no default)."""

    name: str
    dest: str
    read: Callable[[Any, Path], Any]
    default: Callable[[], Any] | None


def _text(value: Any, _base: Path) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("a non-empty string")
    return value


def _path(value: Any, base: Path) -> Path:
    return base / _text(value, base)


def _paths(value: Any, base: Path) -> list[Path]:
    if not isinstance(value, list):
        raise TypeError("a list of paths")
    return [_path(entry, base) for entry in value]


def _records(value: Any, _base: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TypeError("a positive number of records")
    return value


def _output(value: Any, _base: Path) -> str:
    if value not in OUTPUTS:
        raise TypeError(" or ".join(OUTPUTS))
    return str(value)


def _flag(value: Any, _base: Path) -> bool:
    if not isinstance(value, bool):
        raise TypeError("true or false")
    return value


SETTINGS = (
    Setting("bootstrap.servers", "bootstrap_server", _text,
            lambda: os.environ.get("WEIR_BOOTSTRAP", DEFAULT_BOOTSTRAP)),
    Setting("subscribe", "topic", _text, None),
    Setting("warehouse", "warehouse", _path, None),
    Setting("checkpointLocation", "checkpoint", _path, None),
    Setting("maxRecordsPerTrigger", "max_records_per_trigger", _records, lambda: None),
    Setting("metrics.topic", "metrics_topic", _text, lambda: None),
    Setting("spark.master", "master", _text, lambda: "local[*]"),
    Setting("spark.driver.memory", "driver_memory", _text, lambda: "1g"),
    Setting("once", "once", _flag, lambda: False),
    Setting("formats", "formats", _paths, lambda: []),
    Setting("dedupe", "dedupe", _text, lambda: None),
    Setting("dedupe.window", "dedupe_window", _text, lambda: "7d"),
    Setting("output", "output", _output, lambda: "parquet"),
    Setting("iceberg.catalog.uri", "catalog_uri", _text, lambda: None),
    Setting("iceberg.namespace", "namespace", _text, lambda: DEFAULT_NAMESPACE),
)  # fmt: skip
_BY_DEST = {setting.dest: setting for setting in SETTINGS}


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config`` to a parser that has every flag of ``SETTINGS``; those flags then
    default to "not given" (their defaults and required flags are applied by ``merged``)."""
    for action in parser._actions:
        if action.dest in _BY_DEST:
            action.default = None
            action.required = False
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="settings in TOML (bootstrap.servers, subscribe, warehouse, checkpointLocation, "
        "maxRecordsPerTrigger, formats, dedupe, ...); flags override them",
    )


def merged(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with each setting not given as a flag taken from ``--config``'s file, else its
    default; raises PipelineConfigError for a bad file or a required setting given nowhere."""
    from_file = read_config(args.config) if args.config is not None else {}
    values = dict(vars(args))
    for setting in SETTINGS:
        if values.get(setting.dest) is not None:  # given as a flag
            continue
        if setting.name in from_file:
            values[setting.dest] = from_file[setting.name]
        elif setting.default is not None:
            values[setting.dest] = setting.default()
        else:
            flag = "--" + setting.dest.replace("_", "-")
            raise PipelineConfigError(f"{flag} (or {setting.name} in --config) is required")
    return argparse.Namespace(**values)


def read_config(path: Path) -> dict[str, Any]:
    """The settings of a config file by their names in it, their values read."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise PipelineConfigError(f"{path}: {error}") from None
    known = {setting.name: setting for setting in SETTINGS}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise PipelineConfigError(
            f"{path}: unknown settings {', '.join(unknown)} (known: {', '.join(known)})"
        )
    base = path.resolve().parent
    values = {}
    for name, value in raw.items():
        try:
            values[name] = known[name].read(value, base)
        except TypeError as expected:
            raise PipelineConfigError(f"{path}: {name} must be {expected}") from None
    return values
