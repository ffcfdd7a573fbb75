"""DescribeUserScramCredentials (50): each user's SCRAM mechanisms and iteration counts (never
a salt or a key). No names (null or empty) means every user; a name asked twice is
DUPLICATE_RESOURCE and an unknown one RESOURCE_NOT_FOUND, as in Kafka."""

from __future__ import annotations

import collections
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.security.scram import MECHANISMS
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

NO_STORE_MESSAGE = "SCRAM credentials are kept by single-node brokers only"


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.api_version)
    store = broker.scram_credentials
    if store is None:
        return _response(m, (), ErrorCode.invalid_request, NO_STORE_MESSAGE)
    users = store.users()
    asked = [u.name for u in request.body.users or ()]
    counts = collections.Counter(asked)
    results = []
    for name in sorted(users) if not asked else dict.fromkeys(asked):
        if counts[name] > 1:
            results.append(_result(m, name, ErrorCode.duplicate_resource,
                                   f"Cannot describe SCRAM credentials for the same user twice "
                                   f"in a single request: {name}"))  # fmt: skip
        elif name not in users:
            results.append(_result(m, name, ErrorCode.resource_not_found,
                                   f"Attempt to describe a user credential that does not exist: "
                                   f"{name}"))  # fmt: skip
        else:
            infos = tuple(
                make(
                    m.CredentialInfo,
                    mechanism=MECHANISMS[mechanism].type_id,
                    iterations=credential.iterations,
                )
                for mechanism, credential in sorted(users[name].items())
            )
            results.append(_result(m, name, ErrorCode.none, None, infos))
    return _response(m, tuple(results), ErrorCode.none, None)


def _result(
    m: Any, user: str, error: ErrorCode, message: str | None, infos: tuple[Any, ...] = ()
) -> Any:
    return make(
        m.DescribeUserScramCredentialsResult,
        user=user, error_code=error, error_message=message, credential_infos=infos,
    )  # fmt: skip


def _response(m: Any, results: tuple[Any, ...], error: ErrorCode, message: str | None) -> Any:
    return make(
        m.DescribeUserScramCredentialsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        error_message=message,
        results=results,
    )
