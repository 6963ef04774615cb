"""Logon authentication for an instance with `<Authentication><UsersFile>` (issue 12, S1-S7).

The users file is read again when it changes (mtime or size), so `amps users add|remove` takes
effect at the next logon without a restart; a file that no longer parses keeps the users read
last (logged once per change). Password checks run in threads, at most MAX_CONCURRENT_CHECKS at
once, and each source address gets at most MAX_ATTEMPTS_PER_WINDOW logons per WINDOW_S: logons
cannot be used to burn the CPU. Unknown users and wrong passwords are answered alike, after the
same hashing work. Passwords are never logged or kept.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from pathlib import Path

import orjson

from amps import errors
from amps.security.users import Entitlements, User, parse_users, verify

log = logging.getLogger("amps.auth")

MAX_CONCURRENT_CHECKS = 2
MAX_ATTEMPTS_PER_WINDOW = 20
WINDOW_S = 10.0
BINDINGS_FILE_NAME = "client_names.json"


class Authenticator:
    """Checks logons against a users file and binds client names to users (S3)."""

    def __init__(self, users_file: Path, bindings_directory: Path) -> None:
        self.users_file = users_file
        self._users: dict[str, User] = {}
        self._seen: tuple[int, int] | None = None
        self._checks = asyncio.Semaphore(MAX_CONCURRENT_CHECKS)
        self._attempts: dict[str, collections.deque[float]] = {}
        self.bindings = NameBindings(bindings_directory / BINDINGS_FILE_NAME)
        self.failures = 0
        self.refused_for_rate = 0
        self.users()  # a users file that cannot be read at start is a configuration error

    def users(self) -> dict[str, User]:
        """The users, read again if the file changed since the last look."""
        try:
            stat = os.stat(self.users_file)
        except OSError as error:
            if self._seen is None:
                raise errors.ConfigError(
                    "AMPSConfig/Authentication/UsersFile",
                    str(self.users_file),
                    f"a readable users file ({error.strerror}): make it with `amps users add "
                    f"NAME --file {self.users_file}` (the image makes one at its first start "
                    f"from AMPS_ADMIN_PASSWORD)",
                ) from None
            return self._users
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            try:
                self._users = parse_users(self.users_file.read_text(), str(self.users_file))
                log.info("users file %s: %d users", self.users_file, len(self._users))
            except (errors.ConfigError, OSError, UnicodeDecodeError) as error:
                if self._seen is None:
                    raise errors.ConfigError(
                        "AMPSConfig/Authentication/UsersFile",
                        str(self.users_file),
                        f"a valid users file ({error})",
                    ) from None
                log.error(
                    "users file %s not reloaded, the previous users stay: %s",
                    self.users_file,
                    error,
                )
            self._seen = seen
        return self._users

    async def authenticate(self, peer: str, user_name: str, password: str) -> Entitlements:
        """The user's entitlements, or AuthenticationFailed (same answer for every cause)."""
        if not self._allow_attempt(_host_of(peer)):
            self.refused_for_rate += 1
            raise errors.AuthenticationFailed("too many logon attempts from this address; wait")
        users = self.users()
        async with self._checks:
            user = await asyncio.to_thread(verify, users, user_name, password)
        if user is None:
            self.failures += 1
            log.warning("logon refused for user %r from %s: auth failure", user_name[:256], peer)
            raise errors.AuthenticationFailed("user and password do not match")
        return Entitlements(user)

    def _allow_attempt(self, host: str) -> bool:
        now = time.monotonic()
        attempts = self._attempts.setdefault(host, collections.deque())
        while attempts and attempts[0] < now - WINDOW_S:
            attempts.popleft()
        if len(attempts) >= MAX_ATTEMPTS_PER_WINDOW:
            return False
        attempts.append(now)
        if len(self._attempts) > 10_000:  # bounded: forget quiet addresses
            for key in [k for k, v in self._attempts.items() if not v]:
                del self._attempts[key]
        return True


class NameBindings:
    """Client name -> the user who first logged on with it, kept beside the journal (S3): nobody
    else can take the name over and inject sequence numbers into its de-duplication stream."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._owners: dict[str, str] = {}
        if path.exists():
            loaded = orjson.loads(path.read_bytes())
            if isinstance(loaded, dict):
                self._owners = {str(k): str(v) for k, v in loaded.items()}

    def claim(self, client_name: str, user_name: str) -> bool:
        """True if `client_name` is (now) bound to `user_name`; False if another user holds it."""
        owner = self._owners.get(client_name)
        if owner is not None:
            return owner == user_name
        self._owners[client_name] = user_name
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with open(temporary, "wb") as out:
            out.write(orjson.dumps(self._owners))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        return True


def _host_of(peer: str) -> str:
    """gRPC peers look like `ipv4:127.0.0.1:5555` or `ipv6:[::1]:5555`: the address part."""
    address = peer.split(":", 1)[-1]
    return address.rsplit(":", 1)[0]
