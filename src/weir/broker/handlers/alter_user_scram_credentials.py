"""AlterUserScramCredentials (51): add, replace or delete users' SCRAM credentials.

An upsertion carries the salted password the client computed (Hi(password, salt, iterations));
the broker keeps only the StoredKey and ServerKey derived from it, with the salt and iteration
count. Alterations are judged per user: if one of a user's alterations is refused (unknown
mechanism, iterations out of range, a user named twice for one mechanism, deleting what is not
there), none of that user's are applied. The rest are written durably at once."""

from __future__ import annotations

import asyncio
import collections
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.describe_user_scram_credentials import NO_STORE_MESSAGE
from weir.broker.security.credentials import Credentials, Deletion, Upsertion
from weir.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS_BY_ID,
    MIN_ITERATIONS,
    ScramMechanism,
)
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

Refusal = tuple[ErrorCode, str]
#: one alteration write at a time: each reads the credentials the previous one wrote
_WRITING = asyncio.Lock()


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request.api_version)
    body = request.body
    users = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    store = broker.scram_credentials
    if error := cluster_error(broker, AclOperation.ALTER):
        return _response(m, users, dict.fromkeys(users, (error, "Authorization failed.")))
    if store is None:
        refused = {u: (ErrorCode.invalid_request, NO_STORE_MESSAGE) for u in users}
        return _response(m, users, refused)
    async with _WRITING:
        existing = store.users()
        refused = _refusals(body, existing)
        deletions = [
            Deletion(d.name, MECHANISMS_BY_ID[d.mechanism])
            for d in body.deletions
            if d.name not in refused
        ]
        upsertions = [_upsertion(u) for u in body.upsertions if u.name not in refused]
        if deletions or upsertions:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, store.alter, upsertions, deletions)
    return _response(m, users, refused)


def _upsertion(alteration: Any) -> Upsertion:
    mechanism = MECHANISMS_BY_ID[alteration.mechanism]
    credential = mechanism.credential(
        alteration.salted_password, alteration.salt, alteration.iterations
    )
    return Upsertion(alteration.name, mechanism, credential)


def _refusals(body: Any, existing: Credentials) -> dict[str, Refusal]:
    """user -> why that user's alterations are refused (the first reason found)."""
    refused: dict[str, Refusal] = {}
    named = collections.Counter((a.name, a.mechanism) for a in (*body.deletions, *body.upsertions))
    for alteration in (*body.deletions, *body.upsertions):
        reason = _refusal(alteration, existing, named[(alteration.name, alteration.mechanism)])
        if reason is not None:
            refused.setdefault(alteration.name, reason)
    return refused


def _refusal(alteration: Any, existing: Credentials, times_named: int) -> Refusal | None:
    name = alteration.name
    mechanism: ScramMechanism | None = MECHANISMS_BY_ID.get(alteration.mechanism)
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if times_named > 1:
        return ErrorCode.duplicate_resource, (
            f"A user credential cannot be altered twice in the same request: {name}"
        )
    if not hasattr(alteration, "salted_password"):  # a deletion
        if mechanism.name not in existing.get(name, {}):
            return ErrorCode.resource_not_found, (
                f"Attempt to delete a user credential that does not exist: {name}"
            )
        return None
    if alteration.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, (
            f"Too few iterations: at least {MIN_ITERATIONS} are needed"
        )
    if alteration.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, (
            f"Too many iterations: at most {MAX_ITERATIONS} are allowed"
        )
    if not alteration.salt or not alteration.salted_password:
        return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None


def _response(m: Any, users: list[str], refused: dict[str, Refusal]) -> Any:
    results = []
    for user in dict.fromkeys(users):
        error, message = refused.get(user, (ErrorCode.none, None))
        results.append(make(m.AlterUserScramCredentialsResult,
                            user=user, error_code=error, error_message=message))  # fmt: skip
    return make(
        m.AlterUserScramCredentialsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(results),
    )
