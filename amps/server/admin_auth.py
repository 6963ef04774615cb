"""Who may use the admin HTTP interface when authentication is on (issue 12, S1).

HTTP Basic credentials, checked against the same users file as client logons (the same hashing
bound, rate limit and single answer for every failure): statistics need a user with read on
`admin` (or an admin user); every change (a POST) needs an admin user. `/health` stays anonymous
for liveness probes. Use TLS on the admin port, or Basic credentials travel in clear.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from amps import errors

if TYPE_CHECKING:
    # The users file's hashing (argon2, and a hash computed at its import) loads only with a
    # users file (Server._authenticator): an instance without one starts ~50 ms sooner.
    from amps.server.auth import Authenticator

ANONYMOUS_PATHS = frozenset({"/health"})
ADMIN_RESOURCE = "admin"
REALM = 'Basic realm="amps", charset="UTF-8"'


class AdminGuard:
    """Answers whether one admin request may proceed: None, or (status, body) to refuse it."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    async def refusal(
        self, peer: str, path: str, authorization: str | None, change: bool
    ) -> tuple[int, bytes] | None:
        if not change and path in ANONYMOUS_PATHS:
            return None
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return 401, b"credentials required (HTTP Basic, a user of the users file)\n"
        user_name, password = credentials
        try:
            entitlements = await self._authenticator.authenticate(peer, user_name, password)
        except errors.AuthenticationFailed as failure:
            return 401, f"{failure.reason}\n".encode()
        user = entitlements.user
        if change and not user.admin:
            return 403, b"not entitled: changes need an admin user (amps users add --admin)\n"
        if not change and not (user.admin or entitlements.can_read(ADMIN_RESOURCE)):
            return 403, b"not entitled: statistics need read on admin\n"
        return None


def _basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """(user, password) from an `Authorization: Basic ...` header, or None."""
    if authorization is None:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user_name, colon, password = decoded.partition(":")
    return (user_name, password) if colon else None
