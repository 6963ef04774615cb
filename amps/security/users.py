"""The users file: who may log on, with which password hash, and what each may read and write.
[core: no I/O; reading and writing the file is the caller's job]

The file is TOML, written by `amps users` and read by the instance:

    [users.alice]
    password = "$argon2id$v=19$m=19456,t=2,p=1$..."   # a hash, never the password
    read = ["^orders$", "work"]                      # topic names or regexes (AMPS rules)
    write = ["^orders$"]
    admin = false

Entitlements (S2): `read` on a topic allows subscribe, replay and sow; `read` on a queue's name
also allows acknowledging its messages (Q18), not publishing to it; `write` allows publish;
`admin` allows the administrator's changes. Names and regexes follow the topic rules of
amps.config.topics (a name with a regex character is a regex, matched anywhere).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import argon2
import tomli_w

from amps.config.topics import compile_topic_regex, topic_matches
from amps.errors import ConfigError

# OWASP's Password Storage Cheat Sheet, Argon2id: m=19 MiB, t=2, p=1.
HASHER = argon2.PasswordHasher(time_cost=2, memory_cost=19_456, parallelism=1)
# Verified against when the user is unknown, so an unknown user and a wrong password cost the
# same time (S7). Its password is not known to anyone and cannot match.
UNKNOWN_USER_HASH = HASHER.hash("an unknown user never matches this")
MAX_USER_NAME_CHARS = 256
MAX_PASSWORD_BYTES = 4096
MAX_PATTERNS = 256


@dataclass(frozen=True, slots=True)
class User:
    """One entry of the users file."""

    name: str
    password_hash: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    admin: bool = False


@dataclass(slots=True)
class Entitlements:
    """What one user may do; answers are cached per topic (a publisher repeats its topics)."""

    user: User
    _read: dict[str, bool] = field(default_factory=dict)
    _write: dict[str, bool] = field(default_factory=dict)

    def can_read(self, topic: str) -> bool:
        known = self._read.get(topic)
        if known is None:
            known = self._read[topic] = _covered(self.user.read, topic)
        return known

    def can_write(self, topic: str) -> bool:
        known = self._write.get(topic)
        if known is None:
            known = self._write[topic] = _covered(self.user.write, topic)
        return known


def _covered(patterns: Iterable[str], topic: str) -> bool:
    return any(topic_matches(pattern, topic) for pattern in patterns)


def hash_password(password: str) -> str:
    """An Argon2id hash of `password` with a fresh random salt (argon2-cffi draws it)."""
    check_password(password)
    return HASHER.hash(password)


def check_password(password: str) -> None:
    """Refuse passwords no user could have set: empty or longer than MAX_PASSWORD_BYTES."""
    if not password:
        raise ValueError("a password must not be empty")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise ValueError(f"a password must be at most {MAX_PASSWORD_BYTES} bytes")


def verify(users: Mapping[str, User], name: str, password: str) -> User | None:
    """The user when `password` is theirs, else None; the same work whether or not `name`
    exists (S7). CPU-bound (~20-50 ms): adapters run it off the event loop."""
    user = users.get(name)
    encoded = user.password_hash if user is not None else UNKNOWN_USER_HASH
    if not password or len(password.encode()) > MAX_PASSWORD_BYTES:
        password = "\0"  # still hash something: the timing must not tell why it failed
    matched: bool
    try:
        matched = HASHER.verify(encoded, password)
    except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
        matched = False
    return user if matched and user is not None else None


def parse_users(text: str, where: str = "users file") -> dict[str, User]:
    """The users of a users file's text; ConfigError naming the entry and field on a mistake."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(where, None, f"a TOML users file ({error})") from None
    unknown = set(document) - {"users"}
    if unknown:
        raise ConfigError(where, sorted(unknown)[0], "only a [users.NAME] table per user")
    table = document.get("users", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: users", None, "a table of users")
    return {name: _parse_user(where, name, entry) for name, entry in table.items()}


def _parse_user(where: str, name: str, entry: Any) -> User:
    path = f"{where}: users.{name}"
    problem = user_name_problem(name)
    if problem is not None:
        raise ConfigError(path, name, problem)
    if not isinstance(entry, dict):
        raise ConfigError(path, None, "a table with password, read, write, admin")
    unknown = set(entry) - {"password", "read", "write", "admin"}
    if unknown:
        raise ConfigError(f"{path}.{sorted(unknown)[0]}", None, "password, read, write or admin")
    password_hash = entry.get("password")
    if not isinstance(password_hash, str) or not password_hash.startswith("$argon2id$"):
        raise ConfigError(f"{path}.password", None, "an Argon2id hash written by amps users")
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise ConfigError(f"{path}.admin", str(admin), "true or false")
    return User(
        name,
        password_hash,
        _patterns(f"{path}.read", entry.get("read", [])),
        _patterns(f"{path}.write", entry.get("write", [])),
        admin,
    )


def _patterns(path: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_PATTERNS:
        raise ConfigError(path, None, f"a list of at most {MAX_PATTERNS} topic names or regexes")
    for pattern in value:
        problem = pattern_problem(pattern)
        if problem is not None:
            raise ConfigError(path, str(pattern), problem)
    return tuple(value)


def user_name_problem(name: str) -> str | None:
    """Why `name` cannot be a user name, or None."""
    if not name or len(name) > MAX_USER_NAME_CHARS or any(c.isspace() for c in name):
        return f"a user name of 1 to {MAX_USER_NAME_CHARS} characters without spaces"
    return None


def pattern_problem(pattern: Any) -> str | None:
    """Why `pattern` cannot be an entitlement, or None."""
    if not isinstance(pattern, str) or not pattern:
        return "a topic name or regex"
    try:
        compile_topic_regex(pattern)
    except ValueError as error:
        return str(error)
    return None


def render_users(users: Mapping[str, User]) -> str:
    """The users file's text for `users` (sorted by name, so diffs stay small)."""
    table = {
        name: {
            "password": user.password_hash,
            "read": list(user.read),
            "write": list(user.write),
            "admin": user.admin,
        }
        for name, user in sorted(users.items())
    }
    header = "# amps users file: written by `amps users`; holds Argon2id hashes, never passwords.\n"
    return header + tomli_w.dumps({"users": table})
