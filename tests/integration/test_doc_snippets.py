"""Every code block in docs/ and README.md is checked, or says it is a fragment (issue 11, item 9).

The convention (docs/index.md, "Code blocks"): a fence names its language.
- `python`: runs as written in an empty directory; one that names 127.0.0.1:9007 or :8085 runs
  against a fresh instance of the built-in configuration (its `orders` topic and `work` queue)
  on free ports put in their place.
- `xml`: an `<AMPSConfig>` document must load; a section (`<SOW>`, `<Actions>`...) must load in
  a minimal document recording every topic.
- `shell` / `console`: every `amps ...` command (a `$ ` prompt for console) must parse with the
  real CLI: the command exists and takes those options.
- `text`, `yaml`, `proto`, `mermaid`: output, other programs' files and diagrams: shown, not
  run.
- `python fragment` / `xml fragment`: a piece of a larger program or file, checked for syntax
  only (Python 3.11 grammar; well-formed XML).
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import click
import pytest

from amps.cli.main import _register, cli
from amps.config import DEFAULT_CONFIG_XML, ConfigErrors, load_config
from tests.harness.instance import InstanceProcess

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
SHOWN_ONLY = {"text", "yaml", "proto", "mermaid"}
CHECKED = {"python", "xml", "shell", "console"}
DEFAULT_GRPC, DEFAULT_ADMIN = "127.0.0.1:9007", "127.0.0.1:8085"
MINIMAL_CONFIG = """<AMPSConfig><Name>docs</Name>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
{}</AMPSConfig>"""


@dataclass(frozen=True)
class Block:
    where: str
    language: str
    fragment: bool
    code: str


def blocks() -> Iterator[Block]:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        for match in FENCE.finditer(text):
            words = match.group(1).split()
            line = text.count("\n", 0, match.start()) + 1
            yield Block(
                f"{path.relative_to(ROOT)}:{line}",
                words[0] if words else "",
                "fragment" in words[1:],
                match.group(2),
            )


ALL = list(blocks())


def of(language: str, *, fragment: bool = False) -> list[Block]:
    return [b for b in ALL if b.language == language and b.fragment == fragment]


def ids(block: Block) -> str:
    return block.where


def test_every_block_names_a_language_we_know() -> None:
    unknown = [b.where for b in ALL if b.language not in CHECKED | SHOWN_ONLY]
    assert not unknown, f"{unknown}: give each fence a language of {sorted(CHECKED | SHOWN_ONLY)}"
    misplaced = [b.where for b in ALL if b.fragment and b.language not in {"python", "xml"}]
    assert not misplaced, "only python and xml blocks can be fragments"


@pytest.mark.parametrize("block", of("python"), ids=ids)
def test_python_blocks_run_as_written(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = block.code
    process: InstanceProcess | None = None
    if DEFAULT_GRPC in code or DEFAULT_ADMIN in code:
        config = DEFAULT_CONFIG_XML.replace(DEFAULT_GRPC, "127.0.0.1:0")
        config = config.replace(DEFAULT_ADMIN, "127.0.0.1:0")
        process = InstanceProcess(tmp_path / "amps", config).start()
        code = code.replace(DEFAULT_GRPC, process.address)
        code = code.replace(DEFAULT_ADMIN, f"127.0.0.1:{process.admin_port}")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, block.where, "exec"), {"__name__": "__main__"})
    finally:
        if process is not None:
            process.kill()


@pytest.mark.parametrize("block", of("python", fragment=True), ids=ids)
def test_python_fragments_parse(block: Block) -> None:
    ast.parse(block.code, block.where, feature_version=(3, 11))


@pytest.mark.parametrize("block", of("xml") + of("xml", fragment=True), ids=ids)
def test_xml_blocks_load_or_are_well_formed_fragments(block: Block) -> None:
    root = ElementTree.fromstring(block.code)
    if block.fragment:
        return
    document = block.code if root.tag == "AMPSConfig" else MINIMAL_CONFIG.format(block.code)
    try:
        load_config(document, {})
    except ConfigErrors as error:
        pytest.fail(f"{block.where} does not load (or mark it `xml fragment`):\n{error}")


def _amps_commands(block: Block) -> Iterator[list[str]]:
    for raw in block.code.splitlines():
        line = raw.strip()
        if block.language == "console":
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        for part in line.split("|"):
            words = shlex.split(part, comments=True)
            if words[:1] == ["amps"]:
                yield words[1:]


def _parse(args: list[str]) -> None:
    """Resolve the (sub)command and parse its options exactly as `amps` would, without running."""
    command: click.Command = cli
    parent: click.Context | None = None
    name = "amps"
    while isinstance(command, click.Group):
        parent = click.Context(command, info_name=name, parent=parent)
        resolved, sub, args = command.resolve_command(parent, args)
        assert sub is not None
        assert resolved is not None
        command, name = sub, resolved
    command.make_context(name, args, parent=parent)


@pytest.mark.parametrize("block", of("shell") + of("console"), ids=ids)
def test_amps_command_lines_parse(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register()
    (tmp_path / "data" / "journal").mkdir(parents=True)  # what `make run` leaves in ./data
    monkeypatch.chdir(tmp_path)
    for args in _amps_commands(block):
        try:
            _parse(list(args))
        except click.ClickException as error:
            pytest.fail(f"{block.where}: amps {shlex.join(args)}: {error.format_message()}")
