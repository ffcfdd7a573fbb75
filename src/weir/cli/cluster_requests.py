"""Requests the `weir cluster` commands make of a running cluster: one line to the control
socket of `weir cluster up` (stop-broker, restart-broker), and leader elections through the
controller (ElectLeaders, with confluent-kafka's admin client). `weir cluster elect-leaders`,
`stop-broker`, `restart-broker` and `roll` share them; this module prints nothing.
"""

from __future__ import annotations

import hashlib
import socket
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

#: restart-broker waits for a controlled shutdown, then for the new broker's ready line
CONTROL_ANSWER_SECONDS = 180.0


class ControlError(RuntimeError):
    """`weir cluster up` could not be reached, or answered with an error (the message says)."""


def control_address(data_dir: Path) -> str:
    """The abstract Unix socket name of the `weir cluster up` running on `data_dir`."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:24]
    return f"\0weir-cluster-{digest}"


def ask_cluster_up(data_dir: Path, action: str, node_id: int) -> str:
    """Send "ACTION NODE_ID" to the `weir cluster up` running on `data_dir`; the text of its
    "ok ..." answer. ControlError for anything else."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONTROL_ANSWER_SECONDS)
        try:
            sock.connect(control_address(data_dir))
            sock.sendall(f"{action} {node_id}\n".encode())
            answer = sock.makefile("r").readline().strip()
        except (ConnectionRefusedError, FileNotFoundError):
            raise ControlError(
                f"no `weir cluster up` is running with data directory {data_dir}"
            ) from None
        except TimeoutError:
            raise ControlError(
                f"no answer from `weir cluster up` within {CONTROL_ANSWER_SECONDS:g}s"
            ) from None
    status, _, text = answer.partition(" ")
    if status != "ok":
        raise ControlError(text or "the cluster closed the connection")
    return text


@dataclass
class Election:
    """What ElectLeaders answered, partition names ("topic-N") sorted."""

    elected: list[str] = field(default_factory=list)
    not_needed: list[str] = field(default_factory=list)
    #: each partition whose election failed, with the broker's error
    failed: list[tuple[TopicPartition, KafkaError]] = field(default_factory=list)


def elect_leaders(
    admin: AdminClient, kind: ElectionType, partitions: list[TopicPartition] | None
) -> Election:
    """Elect leaders of `partitions` (None: every partition of the cluster). KafkaException
    when the request as a whole fails."""
    results = admin.elect_leaders(kind, partitions).result()
    election = Election()
    for tp, outcome in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        error = outcome.args[0] if isinstance(outcome, KafkaException) else outcome
        if error is None:
            election.elected.append(name)
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            election.not_needed.append(name)
        else:
            election.failed.append((tp, error))
    return election
