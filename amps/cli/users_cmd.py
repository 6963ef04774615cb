"""`amps users add|list|remove --file users.toml`: the users file of an instance (issue 12).

Passwords come from a prompt or from standard input (`--password-stdin`), never from an
argument, so they stay out of shell history and process lists. Only Argon2id hashes are stored.
The file is replaced atomically (write, fsync, rename), readable by its owner only.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from amps.errors import ConfigError
from amps.security.users import (
    User,
    hash_password,
    parse_users,
    pattern_problem,
    render_users,
    user_name_problem,
)

FILE_OPTION = click.option(
    "--file",
    "users_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The users file (TOML), as named by <Authentication><UsersFile>.",
)


def _read(path: Path) -> dict[str, User]:
    if not path.exists():
        return {}
    try:
        return parse_users(path.read_text(), str(path))
    except (ConfigError, UnicodeDecodeError, OSError) as error:
        raise click.ClickException(str(error)) from None


def _write(path: Path, users: dict[str, User]) -> None:
    directory = path.resolve().parent
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(render_users(users))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _check_patterns(option: str, patterns: tuple[str, ...]) -> None:
    for pattern in patterns:
        problem = pattern_problem(pattern)
        if problem is not None:
            raise click.BadParameter(f"{pattern!r}: expected {problem}", param_hint=option)


@click.group("users")
def users() -> None:
    """Keep the users file: names, password hashes, read/write entitlements, admin."""


@users.command("add")
@FILE_OPTION
@click.argument("name")
@click.option("--read", multiple=True, help="Topic or queue name or regex the user may read.")
@click.option("--write", multiple=True, help="Topic name or regex the user may publish to.")
@click.option("--admin", is_flag=True, help="May make administrative changes.")
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from standard input's first line."
)
def add(
    users_file: Path,
    name: str,
    read: tuple[str, ...],
    write: tuple[str, ...],
    admin: bool,
    password_stdin: bool,
) -> None:
    """Add NAME, or replace its password and entitlements."""
    problem = user_name_problem(name)
    if problem is not None:
        raise click.BadParameter(f"expected {problem}", param_hint="NAME")
    _check_patterns("--read", read)
    _check_patterns("--write", write)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    try:
        password_hash = hash_password(password)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    current = _read(users_file)
    replaced = name in current
    current[name] = User(name, password_hash, read, write, admin)
    _write(users_file, current)
    click.echo(f"{'replaced' if replaced else 'added'} user {name} in {users_file}")


@users.command("remove")
@FILE_OPTION
@click.argument("name")
def remove(users_file: Path, name: str) -> None:
    """Remove NAME (its connections are refused from their next logon)."""
    current = _read(users_file)
    if name not in current:
        raise click.ClickException(f"no user {name!r} in {users_file}")
    del current[name]
    _write(users_file, current)
    click.echo(f"removed user {name} from {users_file}")


@users.command("list")
@FILE_OPTION
def list_users(users_file: Path) -> None:
    """The users, their entitlements and whether they are administrators (no hashes)."""
    for user in _read(users_file).values():
        flags = " admin" if user.admin else ""
        click.echo(f"{user.name}{flags}  read={list(user.read)}  write={list(user.write)}")
