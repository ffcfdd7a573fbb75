"""`weir user create|delete|list`: SCRAM users, as kafka-configs.sh --entity-type users
manages them.

Against a running broker they send AlterUserScramCredentials and DescribeUserScramCredentials
(through librdkafka, which salts the password on this side: the password never reaches the
broker). With `--data-dir` they edit a stopped or running single-node broker's credential file
directly, and with `--zookeeper` a cluster's credentials in ZooKeeper (every broker sees the
change at once): that is how the first user is made when every listener, the brokers' own
inter-broker listener included, asks for SCRAM.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from weir.broker.security.cluster_credentials import ZooKeeperCredentialStore
from weir.broker.security.credentials import (
    CredentialStore,
    Deletion,
    ScramCredentialStore,
    Upsertion,
)
from weir.broker.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from weir.cli import kafka_errors
from weir.cli.clients import ADMIN_TIMEOUT, add_bootstrap, add_client_settings, admin_client
from weir.cluster.entity_configs import ZooKeeperUserConfigs
from weir.cluster.metadata import MetadataError
from weir.cluster.zookeeper import ZooKeeperMetadataStore

ZOOKEEPER_TIMEOUT_S = 15.0

DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32
_CLIENT_MECHANISMS = {
    "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
    "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
}


def register(commands: Any) -> None:
    user = commands.add_parser("user", help="create, delete and list SCRAM users")
    sub = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="add a user's SCRAM credential (or replace it)")
    create.add_argument("name")
    create.add_argument("--mechanism", default="SCRAM-SHA-512", choices=sorted(MECHANISMS))
    create.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"{MIN_ITERATIONS} to {MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})",
    )
    password = create.add_mutually_exclusive_group(required=True)
    password.add_argument("--password")
    password.add_argument("--password-file", type=Path, help="its first line is the password")
    create.set_defaults(run=_reporting(run_create))
    delete = sub.add_parser("delete", help="remove a user's SCRAM credentials")
    delete.add_argument("name")
    delete.add_argument(
        "--mechanism", choices=sorted(MECHANISMS), help="only this one (default: all)"
    )
    delete.set_defaults(run=_reporting(run_delete))
    listing = sub.add_parser("list", help="users with their mechanisms and iteration counts")
    listing.set_defaults(run=_reporting(run_list))
    for parser in (create, delete, listing):
        add_bootstrap(parser)
        add_client_settings(parser)
        direct = parser.add_mutually_exclusive_group()
        direct.add_argument(
            "--data-dir",
            type=Path,
            help="edit this single-node broker's credential file instead of asking a broker",
        )
        direct.add_argument(
            "--zookeeper",
            metavar="HOST:PORT[/CHROOT]",
            help="edit a cluster's credentials in ZooKeeper instead of asking a broker",
        )


def _reporting(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`run`, with ZooKeeper's failures (`--zookeeper`) said in one line: exit status 1."""

    def reported(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except MetadataError as exc:
            print(f"weir: {exc}", file=sys.stderr)
            return 1

    return reported


def _direct(args: argparse.Namespace) -> bool:
    """Whether the credentials are edited where they are kept rather than through a broker."""
    return args.data_dir is not None or args.zookeeper is not None


@contextlib.contextmanager
def _store(args: argparse.Namespace) -> Iterator[CredentialStore]:
    """The credential file of `--data-dir`, or the cluster's credentials in `--zookeeper`."""
    if args.data_dir is not None:
        yield ScramCredentialStore(args.data_dir)
        return
    zookeeper = ZooKeeperMetadataStore(args.zookeeper)
    zookeeper.start(ZOOKEEPER_TIMEOUT_S)
    try:
        configs = ZooKeeperUserConfigs(zookeeper.client)
        configs.start()
        yield ZooKeeperCredentialStore(configs)
    finally:
        zookeeper.close()


def run_create(args: argparse.Namespace) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        print(f"weir: --iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}", file=sys.stderr)
        return 2
    password = _password(args)
    if not password:
        print("weir: the password must not be empty", file=sys.stderr)
        return 2
    if _direct(args):
        mechanism = MECHANISMS[args.mechanism]
        salt = secrets.token_bytes(SALT_BYTES)
        salted = mechanism.salted_password(password, salt, args.iterations)
        credential = mechanism.credential(salted, salt, args.iterations)
        with _store(args) as store:
            store.alter([Upsertion(args.name, mechanism, credential)], [])
    else:
        info = ScramCredentialInfo(_CLIENT_MECHANISMS[args.mechanism], args.iterations)
        upsertion = UserScramCredentialUpsertion(args.name, info, password.encode())
        failed = _alter(args, [upsertion])
        if failed:
            return failed
    print(f"created {args.mechanism} credential for user {args.name}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    mechanisms = [args.mechanism] if args.mechanism else None
    if _direct(args):
        with _store(args) as store:
            held = sorted(store.users().get(args.name, {}))
            chosen = [m for m in held if mechanisms is None or m in mechanisms]
            if not chosen:
                print(f"weir: user {args.name} has no such SCRAM credential", file=sys.stderr)
                return 1
            store.alter([], [Deletion(args.name, MECHANISMS[m]) for m in chosen])
    else:
        if mechanisms is None:
            mechanisms = _held_mechanisms(args)
            if mechanisms is None:
                return 1
        deletions = [
            UserScramCredentialDeletion(args.name, _CLIENT_MECHANISMS[m]) for m in mechanisms
        ]
        failed = _alter(args, deletions)
        if failed:
            return failed
    print(f"deleted SCRAM credentials of user {args.name}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    if _direct(args):
        with _store(args) as store:
            rows = [
                (user, mechanism, credential.iterations)
                for user, entries in store.users().items()
                for mechanism, credential in entries.items()
            ]
    else:
        admin = _admin(args)  # kept: the futures fail once their client is gone
        every = admin.describe_user_scram_credentials(request_timeout=ADMIN_TIMEOUT)
        assert isinstance(every, Future)  # no names: one future for all users
        try:
            described = every.result()
        except KafkaException as exc:
            return _fail(exc)
        rows = [
            (user, info.mechanism.name.replace("_", "-"), info.iterations)
            for user, description in described.items()
            for info in description.scram_credential_infos
        ]
    for user, mechanism, iterations in sorted(rows):
        print(f"{user}\t{mechanism}\titerations={iterations}")
    return 0


def _held_mechanisms(args: argparse.Namespace) -> list[str] | None:
    admin = _admin(args)
    try:
        futures = admin.describe_user_scram_credentials(
            [args.name], request_timeout=ADMIN_TIMEOUT
        )
        assert isinstance(futures, dict)  # names given: a future per name
        description = futures[args.name].result()
    except KafkaException as exc:
        _fail(exc)
        return None
    return [info.mechanism.name.replace("_", "-") for info in description.scram_credential_infos]


def _alter(args: argparse.Namespace, alterations: list[Any]) -> int:
    admin = _admin(args)
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=ADMIN_TIMEOUT)
    try:
        for future in futures.values():
            future.result()
    except KafkaException as exc:
        return _fail(exc)
    return 0


def _admin(args: argparse.Namespace) -> AdminClient:
    return admin_client(args)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    lines = args.password_file.read_text(encoding="utf-8").splitlines()
    return lines[0] if lines else ""


def _fail(exc: KafkaException) -> int:
    return kafka_errors.fail(exc)
