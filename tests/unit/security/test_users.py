"""The users file, password hashes and entitlements (issue 12, S2, S6, S7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from amps.cli.users_cmd import users
from amps.errors import ConfigError
from amps.security.users import (
    Entitlements,
    User,
    hash_password,
    parse_users,
    render_users,
    verify,
)


@pytest.fixture(scope="module")
def alice() -> User:
    return User("alice", hash_password("s3cret"), ("^orders$", "work", "^prices\\."), ("orders",))


def test_only_a_hash_is_stored_and_it_round_trips(alice: User) -> None:
    text = render_users({"alice": alice})
    assert "s3cret" not in text
    assert alice.password_hash.startswith("$argon2id$v=19$m=19456,t=2,p=1$")  # OWASP parameters
    assert parse_users(text) == {"alice": alice}


def test_verify_answers_the_user_only_for_its_own_password(alice: User) -> None:
    users = {"alice": alice}
    assert verify(users, "alice", "s3cret") == alice
    assert verify(users, "alice", "S3cret") is None
    assert verify(users, "mallory", "s3cret") is None  # hashed all the same (S7)
    assert verify(users, "alice", "") is None
    assert verify(users, "alice", "x" * 10_000) is None


def test_entitlements_follow_the_topic_rules(alice: User) -> None:
    """S2: a name with a regex character is a regex matched anywhere; otherwise exact."""
    may = Entitlements(alice)
    assert may.can_read("orders")
    assert not may.can_read("orders2")
    assert may.can_read("work")
    assert not may.can_read("work2")
    assert may.can_read("prices.ibm")
    assert not may.can_read("xprices")
    assert may.can_write("orders")
    assert not may.can_write("work")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("not toml [", "a TOML users file"),
        ("[other]\n", "only a [users.NAME] table"),
        ('[users.a]\npassword = "plain"\n', "an Argon2id hash"),
        ('[users."a b"]\npassword = "$argon2id$x"\n', "without spaces"),
        ('[users.a]\npassword = "$argon2id$x"\nread = ["("]\n', "valid regular expression"),
        ('[users.a]\npassword = "$argon2id$x"\nadmin = "yes"\n', "true or false"),
        ('[users.a]\npassword = "$argon2id$x"\nbogus = 1\n', "password, read, write or admin"),
    ],
)
def test_a_bad_users_file_is_refused_with_the_entry_named(text: str, where: str) -> None:
    with pytest.raises(ConfigError, match="users file") as raised:
        parse_users(text)
    assert where in str(raised.value)


def test_amps_users_add_list_remove(tmp_path: Path) -> None:
    """The CLI takes the password from standard input, never from an argument; the file is the
    owner's only."""
    path = tmp_path / "users.toml"
    runner = CliRunner()
    added = runner.invoke(
        users,
        ["add", "--file", str(path), "alice", "--read", "^orders$", "--write", "orders",
         "--admin", "--password-stdin"],
        input="pa55word\n",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert path.stat().st_mode & 0o777 == 0o600
    [user] = parse_users(path.read_text()).values()
    assert verify({"alice": user}, "alice", "pa55word") == user
    assert user.admin
    assert user.read == ("^orders$",)
    assert user.write == ("orders",)
    listed = runner.invoke(users, ["list", "--file", str(path)])
    assert "alice admin" in listed.output
    assert "pa55word" not in listed.output
    assert "$argon2id$" not in listed.output
    bad = runner.invoke(
        users, ["add", "--file", str(path), "bob", "--read", "(", "--password-stdin"], input="x\n"
    )
    assert bad.exit_code == 2
    assert "--read" in bad.output
    removed = runner.invoke(users, ["remove", "--file", str(path), "alice"])
    assert removed.exit_code == 0
    assert parse_users(path.read_text()) == {}
    missing = runner.invoke(users, ["remove", "--file", str(path), "alice"])
    assert missing.exit_code == 1
    assert "no user 'alice'" in missing.output
