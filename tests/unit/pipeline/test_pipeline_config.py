"""`weir pipeline logs --config FILE`: settings by Kafka's and Spark's names, paths read from the
file's directory, flags overriding the file, and the errors of a bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.cli.main import build_parser, main
from weir.cli.pipeline_config import PipelineConfigError, merged

CONFIG = """\
"bootstrap.servers" = "broker-1:9092"
subscribe = "raw-logs"
warehouse = "data/warehouse"
checkpointLocation = "/var/lib/weir/checkpoint"
maxRecordsPerTrigger = 500000
"spark.master" = "local[2]"
formats = ["formats", "/etc/weir/orders.toml"]
"""


def settings(*argv: str):  # type: ignore[no-untyped-def]
    return merged(build_parser().parse_args(["pipeline", "logs", *argv]))


def test_the_file_gives_every_setting_relative_paths_from_its_directory(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "logs.toml"
    config.parent.mkdir()
    config.write_text(CONFIG)
    args = settings("--config", str(config))
    assert args.bootstrap_server == "broker-1:9092" and args.topic == "raw-logs"
    assert args.warehouse == tmp_path / "etc" / "data" / "warehouse"
    assert args.checkpoint == Path("/var/lib/weir/checkpoint")
    assert args.max_records_per_trigger == 500_000 and args.master == "local[2]"
    assert args.formats == [tmp_path / "etc" / "formats", Path("/etc/weir/orders.toml")]
    assert (args.once, args.driver_memory, args.metrics_topic) == (False, "1g", None)


def test_flags_override_the_file_and_a_list_flag_replaces_its_list(tmp_path: Path) -> None:
    config = tmp_path / "logs.toml"
    config.write_text(CONFIG)
    args = settings(
        "--config", str(config), "--topic", "other", "--bootstrap-server", "localhost:9092",
        "--formats", "mine.toml", "--once", "--max-records-per-trigger", "7",
    )  # fmt: skip
    assert (args.topic, args.bootstrap_server, args.once) == ("other", "localhost:9092", True)
    assert args.formats == [Path("mine.toml")] and args.max_records_per_trigger == 7
    assert args.warehouse == tmp_path / "data" / "warehouse"  # from the file


def test_without_a_file_the_flags_and_defaults_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEIR_BOOTSTRAP", "env-broker:9092")
    args = settings("--topic", "t", "--warehouse", "w", "--checkpoint", "c")
    assert (args.bootstrap_server, args.master, args.formats) == ("env-broker:9092", "local[*]", [])
    with pytest.raises(PipelineConfigError, match=r"--topic \(or subscribe in --config\)"):
        settings("--warehouse", "w", "--checkpoint", "c")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('subscribe = "t"\nmaxOffsetsPerTrigger = 5\n', "unknown settings maxOffsetsPerTrigger"),
        ("maxRecordsPerTrigger = -1\n", "maxRecordsPerTrigger must be a positive number"),
        ('once = "yes"\n', "once must be true or false"),
        ('formats = "formats"\n', "formats must be a list of paths"),
        ("subscribe = \n", "logs.toml: "),
    ],
)
def test_a_bad_file_is_refused_naming_it_and_the_setting(
    tmp_path: Path, text: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "logs.toml"
    config.write_text(text)
    assert main(["pipeline", "logs", "--config", str(config)]) == 2
    assert error in capsys.readouterr().err


def test_dedupe_from_the_file_or_a_flag_becomes_the_jobs_key_and_window(tmp_path: Path) -> None:
    from weir.cli.pipeline import logs_job
    from weir.pipeline.dedupe import DedupeKey

    base = ("--topic", "t", "--warehouse", "w", "--checkpoint", "c")
    plain = logs_job(settings(*base))
    assert plain.dedupe is None and plain.dedupe_window_s == 7 * 86400
    assert logs_job(settings(*base, "--dedupe")).dedupe == DedupeKey.parse("agent")
    config = tmp_path / "logs.toml"
    config.write_text('dedupe = "host:seq"\n"dedupe.window" = "12h"\n')
    job = logs_job(settings(*base, "--config", str(config)))
    assert job.dedupe == DedupeKey(("host",), "seq", headers=False)
    assert job.dedupe_window_s == 12 * 3600


def test_iceberg_output_from_the_file_or_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from weir.cli.pipeline import logs_job

    base = ("--topic", "t", "--warehouse", str(tmp_path / "w"), "--checkpoint", "c")
    assert logs_job(settings(*base)).iceberg is None
    default = logs_job(settings(*base, "--output", "iceberg")).iceberg
    assert default is not None
    catalog = tmp_path / "w" / "catalog.db"
    assert (default.uri, default.namespace) == (f"sqlite:///{catalog}", "weir")
    config = tmp_path / "logs.toml"
    config.write_text('output = "iceberg"\n"iceberg.catalog.uri" = "postgresql+psycopg://db/x"\n'
                      '"iceberg.namespace" = "etl"\n')  # fmt: skip
    given = logs_job(settings(*base, "--config", str(config))).iceberg
    assert given is not None
    assert (given.uri, given.namespace) == ("postgresql+psycopg://db/x", "etl")
    assert logs_job(settings(*base, "--config", str(config), "--output", "parquet")).iceberg is None
    config.write_text('output = "delta"\n')
    assert main(["pipeline", "logs", "--config", str(config)]) == 2
    assert "output must be parquet or iceberg" in capsys.readouterr().err
