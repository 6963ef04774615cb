"""Client CLI: help, usage errors (exit 2), an unreachable server (exit 3), message JSON."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from amps.cli.client_cmds import COMMANDS, message_json
from amps.client import Message


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: str(command.name))
def test_every_client_command_has_help(command: object) -> None:
    import click

    assert isinstance(command, click.Command)
    result = CliRunner().invoke(command, ["--help"])
    assert result.exit_code == 0
    assert "--server" in result.output


def _by_name(name: str) -> object:
    return next(command for command in COMMANDS if command.name == name)


def test_sow_delete_needs_exactly_one_of_bookmark_and_filter() -> None:
    import click

    command = _by_name("sow-delete")
    assert isinstance(command, click.Command)
    result = CliRunner().invoke(command, ["--server", "h:1", "--topic", "q"])
    assert result.exit_code == 2
    both = ["--server", "h:1", "--topic", "q", "--bookmark", "b", "--filter", "x"]
    assert CliRunner().invoke(command, both).exit_code == 2
    flags = ["--server", "h:1", "--topic", "q", "--bookmark", "b", "--cancel", "--expire"]
    assert CliRunner().invoke(command, flags).exit_code == 2


def test_a_bookmark_store_needs_a_sub_id_and_a_readable_file(tmp_path: Path) -> None:
    import click

    command = _by_name("subscribe")
    assert isinstance(command, click.Command)
    store = tmp_path / "bookmarks"
    args = ["--server", "127.0.0.1:1", "--topic", "t", "--bookmark-store", str(store)]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2
    assert "--bookmark-store needs --sub-id" in result.output
    store.write_text("not json\n")
    result = CliRunner().invoke(command, [*args, "--sub-id", "s"])
    assert result.exit_code == 1
    assert "bookmarks:1: not a bookmark store entry" in result.output


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.timeout(30)
def test_an_unreachable_server_exits_with_status_3() -> None:
    import click

    command = _by_name("ping")
    assert isinstance(command, click.Command)
    args = ["--server", f"127.0.0.1:{_closed_port()}", "--connect-timeout", "0.5"]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 3


def test_a_json_payload_is_printed_parsed_and_text_as_text() -> None:
    parsed = message_json(Message(None, topic="t", data=b'{"a": 1}', bookmark="1|2|"))
    assert parsed == {"topic": "t", "bookmark": "1|2|", "data": {"a": 1}}
    text = message_json(Message(None, topic="t", data=b"hello", bookmark="1|3|"))
    assert text["data"] == "hello"


def test_a_queue_message_shows_its_lease_deadline_in_utc_and_delivery_count() -> None:
    message = Message(
        None,
        topic="q",
        data=b"1",
        bookmark="1|4|",
        lease_deadline_us=1_700_000_000_123_000,
        delivery_count=2,
        is_queue=True,
    )
    shown = message_json(message)
    assert shown["lease_deadline"] == "2023-11-14T22:13:20.123Z"
    assert shown["delivery_count"] == 2
    assert shown["data"] == 1
