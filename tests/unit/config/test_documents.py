"""Whole-document failures: malformed XML, entity tricks, wrong roots, and garbage never crashes."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.config import DEFAULT_CONFIG_XML, Config, ConfigErrors, load_config
from amps.errors import ConfigError

from .helpers import errors_of


def test_syntax_errors_name_the_line_and_column() -> None:
    (error,) = errors_of("<AMPSConfig>\n  <Name>a</Nam>\n</AMPSConfig>")
    assert error.path == "(document)"
    assert error.value == "line 2, column 12"
    assert error.expected.startswith("well-formed XML (mismatched tag")


@pytest.mark.parametrize("text", ["", "   ", "<AMPSConfig>", "not xml", "<a></b>"])
def test_unparsable_documents(text: str) -> None:
    (error,) = errors_of(text)
    assert error.path == "(document)"
    assert "well-formed XML" in error.expected


def test_the_root_must_be_amps_config() -> None:
    (error,) = errors_of("<Config><Name>a</Name></Config>")
    assert (error.path, error.value) == ("(document)", "Config")
    assert "<AMPSConfig>" in error.expected


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
  <!ENTITY lol "lol">
  <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
  <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<AMPSConfig><Name>&lol3;</Name></AMPSConfig>
"""

EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE a [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<AMPSConfig><Name>&secret;</Name></AMPSConfig>
"""


@pytest.mark.parametrize("text", [BILLION_LAUGHS, EXTERNAL_ENTITY])
def test_entity_declarations_are_refused(text: str) -> None:
    (error,) = errors_of(text)
    assert error.path == "(document)"
    assert "without DTD or entity declarations" in error.expected


def test_a_plain_doctype_is_refused_too() -> None:
    (error,) = errors_of("<!DOCTYPE AMPSConfig><AMPSConfig><Name>a</Name></AMPSConfig>")
    assert "DTD" in error.expected


def test_undefined_entities_are_syntax_errors() -> None:
    (error,) = errors_of("<AMPSConfig><Name>&nope;</Name></AMPSConfig>")
    assert "undefined entity" in error.expected


def test_comments_and_declarations_are_fine() -> None:
    text = '<?xml version="1.0" encoding="UTF-8"?><!-- c --><AMPSConfig><!-- c --><Name>a</Name>'
    assert load_config(text + "</AMPSConfig>").name == "a"


def test_a_config_error_is_an_amps_config_error() -> None:
    with pytest.raises(ConfigError):
        load_config("<AMPSConfig/>")


def _outcome(text: str) -> None:
    """Loading gives a Config or raises ConfigErrors with at least one error; nothing else."""
    outcome: Config | ConfigErrors
    try:
        outcome = load_config(text)
    except ConfigErrors as error:
        outcome = error
    if isinstance(outcome, ConfigErrors):
        assert outcome.errors
        assert all(isinstance(e, ConfigError) for e in outcome.errors)
        assert str(outcome)
    else:
        assert isinstance(outcome, Config)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_random_text_gives_a_config_or_a_config_error(text: str) -> None:
    _outcome(text)


TAGS = [
    "AMPSConfig", "Name", "Group", "Admin", "InetAddr", "Transports", "Transport", "Type",
    "TransactionLog", "JournalDirectory", "Topic", "MessageType", "SOW", "Queue", "LocalQueue",
    "GroupLocalQueue", "UnderlyingTopic", "DefaultPublishTarget", "LeasePeriod", "Priority",
    "Actions", "Action", "On", "Do", "Module", "Options", "Replication", "Destination", "Logging",
]  # fmt: skip
VALUES = ["", "1", "0", "json", "binary", ".*", "^a$|^b$", "30s", "10M", "${X}", "${X:-1}", "a b"]


@st.composite
def elements(draw: st.DrawFn, depth: int = 0) -> str:
    tag = draw(st.sampled_from(TAGS))
    if depth >= 3 or draw(st.booleans()):
        body = draw(st.sampled_from(VALUES) | st.text(string.printable, max_size=8))
        body = body.replace("<", "&lt;").replace("&", "&amp;") if "<" in body else body
    else:
        body = "".join(draw(st.lists(elements(depth + 1), max_size=4)))
    return f"<{tag}>{body}</{tag}>"


@settings(max_examples=150, deadline=None)
@given(st.lists(elements(1), max_size=8))
def test_random_element_trees_give_a_config_or_a_config_error(children: list[str]) -> None:
    _outcome(f"<AMPSConfig>{''.join(children)}</AMPSConfig>")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_garbled_default_config_gives_a_config_or_a_config_error(data: st.DataObject) -> None:
    text = DEFAULT_CONFIG_XML
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(position, min(len(text), position + 12)))
        insert = data.draw(st.sampled_from(["", "<", ">", "/", "x", "${", "&", "<Bogus/>", "0"]))
        text = text[:position] + insert + text[end:]
    _outcome(text)
