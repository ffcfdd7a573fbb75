"""`weir user` and the console clients' security settings, end to end: the first SCRAM user
made in the data directory before the broker starts, then users managed and topics listed over
the SASL listener itself with --command-config and -X."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from broker_process import BrokerProcess
from confluent_kafka import Producer

TIMEOUT = 60


def weir(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip


def test_first_user_in_the_data_dir_then_users_managed_over_sasl(tmp_path: Path) -> None:
    data = tmp_path / "broker"
    password_file = tmp_path / "admin.pw"
    password_file.write_text("admin-secret\n")
    made = weir("user", "create", "admin", "--password-file", password_file, "--data-dir", data)
    assert made.returncode == 0, made.stderr
    assert "admin-secret" not in (data / "scram-credentials.json").read_text()
    broker = BrokerProcess(data, config={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    })  # fmt: skip
    broker.start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        properties = tmp_path / "admin.properties"
        properties.write_text(
            "# as kafka-*.sh --command-config files are written\n"
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="admin" password="admin-secret";\n'
        )
        admin = ("--bootstrap-server", bootstrap, "--command-config", properties)
        made = weir("user", "create", "erin", "--mechanism", "SCRAM-SHA-256",
                    "--password", "erin-secret", *admin)  # fmt: skip
        assert made.returncode == 0, made.stderr
        listed = weir("user", "list", *admin)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines() == [
            "admin\tSCRAM-SHA-512\titerations=4096",
            "erin\tSCRAM-SHA-256\titerations=4096",
        ]
        erin = ("-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
                "-X", "sasl.username=erin", "-X", "sasl.password=erin-secret")  # fmt: skip
        created = weir("topic", "create", "secured", "--bootstrap-server", bootstrap, *erin)
        assert created.returncode == 0, created.stderr
        topics = weir("topic", "list", "--bootstrap-server", bootstrap, *erin)
        assert topics.stdout.split() == ["secured"], topics.stderr
        deleted = weir("user", "delete", "erin", *admin)
        assert deleted.returncode == 0, deleted.stderr
        errors: list[str] = []
        refused = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "erin",
                            "sasl.password": "erin-secret",
                            "error_cb": lambda e: errors.append(e.str())})  # fmt: skip
        refused.poll(5)
        assert any("authentication" in e.lower() for e in errors), errors
    finally:
        broker.stop()
