"""How a message body reads as a JSON document: the answers every parse backend must keep
(docs/reference/expressions.md, "Parse backend"). Each test runs over both backends: pysimdjson
(lazy proxies) and the standard-library parse used without it and for what simdjson refuses."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps.expr import EvalContext, Message, compile_filter, jsondoc, parse_expression
from amps.expr.reference import evaluate, truth_of
from amps.expr.values import same
from tests.unit.expr.test_properties import DOCUMENTS, _conditions


@pytest.fixture(autouse=True, params=["simdjson", "stdlib"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "simdjson" and not jsondoc.AVAILABLE:
        pytest.skip("pysimdjson not importable")
    jsondoc.use_simdjson(request.param == "simdjson")
    try:
        yield request.param
    finally:
        jsondoc.use_simdjson(True)


def test_backend_is_the_one_asked(backend: str) -> None:
    assert jsondoc.backend() == backend
    lazy = type(Message(b'{"a": 1}').document()) is not dict
    assert lazy == (backend == "simdjson")


def _value(text: str, data: bytes) -> object:
    return compile_filter(text).evaluate(Message(data))


@pytest.mark.parametrize(
    ("text", "data", "expected"),
    [
        ("/a", b'{"a": 1, "a": 2}', 1),
        ("/a", b'{"a": 1, "b": 0, "a": "x"}', 1),
        ("/a", b'{"a": [1, 2], "a": 3}', [1, 2]),
        ("/a", b'{"a": 3, "a": [1, 2]}', 3),
        ("/a", b'{"a": {"b": 1}, "a": 3}', None),
        ("/n/a", b'{"n": {"a": 1, "a": 2}}', 1),
        ("/n/a", b'{"n": {"a": 1}, "n": {"a": 3}}', 1),
        ("/n/b", b'{"n": {"a": 1}, "n": {"b": 3}}', None),
        ("/l/a", b'{"l": [{"a": 1, "a": 2}, {"a": 3}]}', [1, 3]),
        ("/l/a", b'{"l": [[{"a": "x", "a": "y"}], {"a": 3, "a": 4}]}', ["x", 3]),
        ("/l[1]/a", b'{"l": [{"a": 1, "a": 2}, {"a": 3, "a": 5}]}', 3),
        ("/l", b'{"l": [1, [2, [3]]], "l": 9}', [1, 2, 3]),
    ],
)
def test_duplicate_keys_first_occurrence_wins(text: str, data: bytes, expected: object) -> None:
    """AMPS's default (EarlyTerminationOptimization=true, AMPS-EXPRESSIONS.md §2.2)."""
    assert same(_value(text, data), expected)
    assert same(evaluate(parse_expression(text), Message(data)), expected)


@pytest.mark.parametrize(
    "text",
    [
        "/a = 2", "/a > 1", "/a >= 2", "/a IN (2, 3)", "/a != 1", "NOT /a = 1", "0 = 1 OR /a = 2",
        "/s = 'y'", "/s != 'x'", "/s > 'x'", "/s IN ('y', 'z')", "/s NOT IN ('x')", "/s LIKE '^y'",
    ],
)  # fmt: skip
def test_duplicate_keys_on_every_fast_path(text: str) -> None:
    """Each text reads the first occurrences (a = 2, s = 'y'), whatever the later ones say."""
    data = b'{"a": 2, "s": "y", "a": 1, "s": "x"}'
    assert compile_filter(text).matches(Message(data))
    assert truth_of(parse_expression(text), Message(data), EvalContext()) is True


@pytest.mark.parametrize(
    "text",
    [
        "/a = 2", "/a > 1", "/a >= 2", "/a < 3", "/a IN (2, 3)", "/a != 1", "/s = 'y'",
        "/s != 'x'", "/s > 'x'", "/s IN ('y', 'z')", "/s NOT IN ('q')", "/s LIKE '^y'",
        "/s BEGINS WITH ('y')", "/a + 0 = 1", "/a BETWEEN 2 AND 2", "/s IS NOT NULL",
    ],
)  # fmt: skip
def test_array_values_on_every_fast_path(text: str) -> None:
    """An array field (a simdjson Array proxy on the lazy backend) is an array value on every
    fast path: any element may match, and never silently none (`x in frozenset` included)."""
    data = b'{"a": [1, 2], "s": ["x", "y"], "a": 0, "s": "q"}'
    assert compile_filter(text).matches(Message(data))
    assert truth_of(parse_expression(text), Message(data), EvalContext()) is True


@pytest.mark.parametrize(
    "text",
    ["/o = 'x'", "/o IN ('x')", "/o > 1", "/o IN (1)", "/o != 'x'", "/o = 1", "/o LIKE 'x'"],
)
def test_object_values_are_null_on_every_fast_path(text: str) -> None:
    data = b'{"o": {"x": "x"}}'
    assert not compile_filter(text).matches(Message(data))
    assert compile_filter("/o IS NULL").matches(Message(data))


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


def test_doc_keeps_the_first_occurrence_everywhere() -> None:
    data = b'{"a": 1, "l": [{"b": 1, "b": 2}, [{"c": 3, "c": 4}]], "n": {"d": 5, "d": 6}, "a": 2}'
    msg = Message(data)
    expected = {"a": 1, "l": [{"b": 1}, [{"c": 3}]], "n": {"d": 5}}
    assert msg.doc == expected
    assert list(msg.doc) == ["a", "l", "n"]
    assert compile_filter("/a = 1 AND /l/b = 1 AND /n/d = 5").matches(msg)


def test_doc_of_a_deep_body() -> None:
    data = b'{"a": ' + b"[" * 500 + b"1" + b"]" * 500 + b"}"
    msg = Message(data)
    depth, node = 0, msg.doc["a"]
    while type(node) is list:
        depth, node = depth + 1, node[0]
    assert (depth, node) == (500, 1)
    assert compile_filter("/a = 1").matches(Message(data))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": 1, "a": 18446744073709551616}', 1),  # simdjson refuses: stdlib, first wins
        (b'{"a": "\\ud800", "a": 2, "b": 1}', "\ud800"),
        (b'{"a": NaN, "a": 1}', float("nan")),
        (b'{"a": 1e400, "a": 1}', float("inf")),
    ],
)
def test_bodies_simdjson_refuses_keep_the_first_key(data: bytes, expected: object) -> None:
    assert same(_value("/a", data), expected)
    assert same(Message(data).doc["a"], expected)


def test_bodies_too_deep_for_both_parsers_read_as_empty() -> None:
    data = b'{"a": 1, "n": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert compile_filter("/a IS NULL").matches(Message(data))
    assert Message(data).doc == {}


def test_parser_reuse_never_disturbs_live_documents() -> None:
    """A parser is reused only when no proxy of its last document is alive."""
    bodies = [b'{"a": %d, "l": [{"b": %d}], "s": "v%d"}' % (i, i, i) for i in range(50)]
    messages = [Message(body) for body in bodies]
    flt = compile_filter("/a >= 0 AND /s != 'z'")
    assert all(flt.matches(m) for m in messages)  # every document parsed, all kept alive
    held = [m.document()["l"] for m in messages]  # proxies held beyond their message
    for i, m in enumerate(messages):
        assert compile_filter("/a").evaluate(m) == i
        assert compile_filter("/l/b").evaluate(m) == [i]
        assert compile_filter("/s").evaluate(m) == f"v{i}"
    del messages
    fresh = [Message(body) for body in reversed(bodies)]
    assert [compile_filter("/a").evaluate(m) for m in fresh] == list(range(49, -1, -1))
    assert [compile_filter("/l[0]/b").evaluate(Message(b)) for b in bodies] == list(range(50))
    assert len(held) == 50


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
