"""TLS and SASL against plaintext, in one run on one broker.

Starts `weir broker start` with three listeners on loopback: PLAINTEXT, SSL and SASL_SSL
(SCRAM-SHA-512, a user made through AlterUserScramCredentials), with a certificate made by the
`openssl` command. For each listener, in turn, confluent-kafka produces `--messages` messages of
`--size` bytes (acks=1) to a topic of its own and consumes them back from the beginning, in
`--rounds` interleaved rounds (the best of each is reported); each result has the rate and the
broker's CPU-seconds per GB (from /proc, the broker process alone).
Plaintext fetches leave the broker with sendfile; TLS fetches are read and encrypted in user
space, which is the cost this measures. Also reports whether kernel TLS could be used here.
Writes JSON to bench/results/security.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

sys.path.insert(0, str(Path(__file__).parent))
from broker import MB, cpu_seconds

USER, PASSWORD = "bench", "bench-secret"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
TIMEOUT = 300


def make_certificate(directory: Path) -> dict[str, Path]:
    """A CA and a broker certificate for 127.0.0.1 signed by it."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "ca.key",
        "-out", "ca.pem", "-subj", "/CN=weir bench CA")  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    run("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-out", "broker.pem", "-extfile", "san.ext")  # fmt: skip
    keystore = directory / "keystore.pem"
    keystore.write_text(
        (directory / "broker.key").read_text() + (directory / "broker.pem").read_text()
    )
    return {"ca": directory / "ca.pem", "keystore": keystore}


def start_broker(directory: Path, keystore: Path) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    config = directory / "broker.toml"
    config.write_text(
        'listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0"\n'
        f'"ssl.keystore.location" = "{keystore}"\n'
        '"sasl.enabled.mechanisms" = "SCRAM-SHA-512"\n'
    )
    ready = directory / "ready"
    command = [sys.executable, "-m", "weir.cli.main", "broker", "start", "--data-dir",
               str(directory / "data"), "--config", str(config),
               "--ready-file", str(ready)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    # the ready file lists every listener once the broker accepts connections
    while not (ready.exists() and len(ready.read_text().split()) > 1):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("broker did not start")
        time.sleep(0.05)
    ports = {
        line.split("://")[0]: int(line.rsplit(":", 1)[1]) for line in ready.read_text().split()[1:]
    }
    return process, ports


def client_settings(protocol: str, port: int, ca: Path) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 3,
                                "security.protocol": protocol}  # fmt: skip
    if protocol != "PLAINTEXT":
        settings["ssl.ca.location"] = str(ca)
    if protocol == "SASL_SSL":
        settings.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                         "sasl.password": PASSWORD})  # fmt: skip
    return settings


def produce(
    settings: dict[str, Any], topic: str, count: int, size: int, pid: int
) -> dict[str, Any]:
    producer = Producer({**settings, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 2_097_151})  # fmt: skip
    value = os.urandom(size // 2).hex().encode()[:size]
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(TIMEOUT)
    return _rates(
        count - remaining, size, time.perf_counter() - started, cpu_seconds(pid) - cpu_before
    )


def consume(
    settings: dict[str, Any], topic: str, expected: int, size: int, pid: int
) -> dict[str, Any]:
    consumer = Consumer({**settings, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 1})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    while got < expected and time.perf_counter() - started < TIMEOUT:
        got += sum(
            1 for m in consumer.consume(num_messages=10_000, timeout=1.0) if m.error() is None
        )
    seconds = time.perf_counter() - started
    consumer.close()
    return _rates(got, size, seconds, cpu_seconds(pid) - cpu_before)


def _rates(messages: int, size: int, seconds: float, cpu: float) -> dict[str, Any]:
    return {
        "messages": messages,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(messages / seconds),
        "mb_per_s": round(messages * size / seconds / MB, 1),
        "broker_cpu_s_per_gb": round(cpu / max(1, messages * size) * 1e9, 2),
    }


def kernel_tls() -> dict[str, Any]:
    """What kernel TLS would need here: the ssl module's switch (Python 3.12+) and the kernel's
    `tls` module."""
    modules = Path("/proc/modules").read_text() if Path("/proc/modules").exists() else ""
    return {
        "python": platform.python_version(),
        "openssl": ssl.OPENSSL_VERSION,
        "ssl_OP_ENABLE_KTLS": hasattr(ssl, "OP_ENABLE_KTLS"),
        "tls_kernel_module_loaded": any(line.split()[0] == "tls" for line in modules.splitlines()),
        "kernel": platform.release(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2, help="the best round is reported")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "security.json")  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-bench-security-") as scratch:
        directory = Path(scratch)
        files = make_certificate(directory)
        process, ports = start_broker(directory, files["keystore"])
        try:
            admin = AdminClient(client_settings("PLAINTEXT", ports["PLAINTEXT"], files["ca"]))
            upsertion = UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
            )
            for future in admin.alter_user_scram_credentials([upsertion]).values():
                future.result(TIMEOUT)
            rounds: dict[str, list[dict[str, Any]]] = {p: [] for p in PROTOCOLS}
            for round_number in range(args.rounds):  # interleaved, so drift hits all alike
                for protocol in PROTOCOLS:
                    settings = client_settings(protocol, ports[protocol], files["ca"])
                    topic = f"bench-{protocol.lower()}-{round_number}"
                    produced = produce(settings, topic, args.messages, args.size, process.pid)
                    consumed = consume(
                        settings, topic, produced["messages"], args.size, process.pid
                    )
                    rounds[protocol].append({"produce": produced, "consume": consumed})
        finally:
            process.terminate()
            process.wait(30)
    results: dict[str, Any] = {
        protocol: {
            kind: max((r[kind] for r in runs), key=lambda r: r["mb_per_s"])
            for kind in ("produce", "consume")
        }
        for protocol, runs in rounds.items()
    }
    base = results["PLAINTEXT"]
    for protocol in ("SSL", "SASL_SSL"):
        results[protocol]["share_of_plaintext_rate"] = {
            kind: round(results[protocol][kind]["mb_per_s"] / base[kind]["mb_per_s"], 3)
            for kind in ("produce", "consume")
        }
    report = {
        "benchmark": "security",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "messages": args.messages,
            "rounds": args.rounds,
            "message_bytes": args.size,
            "acks": "1",
            "partitions": 1,
            "client": "confluent-kafka",
        },
        "results": results,
        "kernel_tls": kernel_tls(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
