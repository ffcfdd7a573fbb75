"""The security settings of `weir pipeline logs` reach every client of the job: the source's
readers (as `kafka.`-prefixed options) and the metrics topic's producer."""

from __future__ import annotations

from pathlib import Path

from weir.cli.main import build_parser
from weir.cli.pipeline import logs_job
from weir.cli.pipeline_config import merged
from weir.pipeline.options import SourceOptions


def test_command_config_and_x_flags_reach_the_source_and_the_metrics_producer(
    tmp_path: Path,
) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=ScramLoginModule required username="etl" password="etl-secret";\n'
    )
    args = build_parser().parse_args(
        ["pipeline", "logs", "--topic", "raw", "--warehouse", str(tmp_path / "w"),
         "--checkpoint", str(tmp_path / "c"), "--bootstrap-server", "broker:9094",
         "--command-config", str(properties), "-X", f"ssl.ca.location={tmp_path}/ca.pem"]
    )  # fmt: skip
    job = logs_job(merged(args))
    expected = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "etl",
        "sasl.password": "etl-secret",
        "ssl.ca.location": f"{tmp_path}/ca.pem",
    }
    assert job.client() == {**expected, "bootstrap.servers": "broker:9094"}
    reader_options = {"bootstrap.servers": job.bootstrap, "subscribe": job.topic,
                      **job.source_client_options()}  # fmt: skip
    assert SourceOptions.parse(reader_options).client == job.client()
