"""How a message body reads as a JSON document: the answers any parse backend must keep
(docs/reference/expressions.md, "Parse backend")."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps.expr import EvalContext, Message, compile_filter, parse_expression
from amps.expr.reference import evaluate, truth_of
from amps.expr.values import same
from tests.unit.expr.test_properties import DOCUMENTS, _conditions


def _value(text: str, data: bytes) -> object:
    return compile_filter(text).evaluate(Message(data))


@pytest.mark.parametrize(
    ("text", "data", "expected"),
    [
        ("/a", b'{"a": 1, "a": 2}', 2),
        ("/a", b'{"a": 1, "b": 0, "a": "x"}', "x"),
        ("/n/a", b'{"n": {"a": 1, "a": 2}}', 2),
        ("/n/a", b'{"n": {"a": 1}, "n": {"a": 3}}', 3),
        ("/l/a", b'{"l": [{"a": 1, "a": 2}, {"a": 3}]}', [2, 3]),
    ],
)
def test_duplicate_keys_last_occurrence_wins(text: str, data: bytes, expected: object) -> None:
    assert same(_value(text, data), expected)


@pytest.mark.parametrize(
    "text",
    [
        "/a = 2", "/a > 1", "/a >= 2", "/a IN (2, 3)", "/a != 1", "NOT /a = 1", "0 = 1 OR /a = 2",
        "/s = 'y'", "/s != 'x'", "/s > 'x'", "/s IN ('y', 'z')", "/s NOT IN ('x')", "/s LIKE '^y'",
    ],
)  # fmt: skip
def test_duplicate_keys_on_every_fast_path(text: str) -> None:
    assert compile_filter(text).matches(Message(b'{"a": 1, "s": "x", "a": 2, "s": "y"}'))


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        (b"18446744073709551615", 2**64 - 1),
        (b"9223372036854775808", 2**63),
        (b"-9223372036854775808", -(2**63)),
        (b"18446744073709551616", 18446744073709551616.0),
        (b"-9223372036854775809", -9223372036854775809.0),
        (b"123456789012345678901234567890", 1.2345678901234568e29),
        (b"1.0", 1.0),
        (b"-0.0", -0.0),
        (b"1E2", 100.0),
        (b"5e-324", 5e-324),
    ],
)
def test_numbers_read_as_q6_says(literal: bytes, expected: object) -> None:
    """Integers in [-2**63, 2**64-1] stay integers; beyond, they are doubles (Q6)."""
    assert same(_value("/a", b'{"a": ' + literal + b"}"), expected)


def test_text_decodes_escapes_and_utf8() -> None:
    data = '{"a": "\\u00e9\\ud83d\\ude00", "b": "é😀", "\\u0063": 1}'.encode()
    assert compile_filter("/a = /b AND /a = 'é😀' AND /c = 1").matches(Message(data))


@pytest.mark.parametrize("data", [b'{"a": "\xff"}', b'{"a": 1}\x00', b'{"a": 01}'])
def test_malformed_bodies_read_every_path_as_null(data: bytes) -> None:
    assert compile_filter("/a IS NULL").matches(Message(data))


def test_doc_is_the_whole_body() -> None:
    data = b'{"a": [1, {"b": [2, [3]]}], "c": {"d": null}, "e": "x"}'
    assert Message(data).doc == orjson.loads(data)


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(_conditions(), st.lists(DOCUMENTS, min_size=1, max_size=3))
def test_compiled_over_bytes_equals_reference_over_objects(
    text: str, docs: list[dict[str, object]]
) -> None:
    """The compiled function reads the serialised body; the reference walks the Python objects."""
    tree = parse_expression(text)
    flt = compile_filter(text)
    for doc in docs:
        body = Message(orjson.dumps(doc))
        objects = Message.from_obj(doc)
        assert same(flt.evaluate(body), evaluate(tree, objects)), (text, doc)
        expected = truth_of(tree, objects, EvalContext()) is True
        assert flt.matches(body) is expected, (text, doc)
