"""Operators of AMPS-EXPRESSIONS.md §3 and §5, one behaviour per test, and the §10 decisions."""

from __future__ import annotations

import math

import pytest

from amps.expr import Message, compile_filter

from .helpers import matches, value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9 / 4", 2),
        ("-8 % 3", -2),
        ("8 % -3", 2),
        ("8 MOD 3", 2),
        ("3.0 / 4", 0.75),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("-(2 + 3)", -5),
        ("- -3", 3),
        ("'7' + 1", 8),
        ("1.5e3 + 0", 1500.0),
        ("18446744073709551615 + 1", 18446744073709551616.0),  # Q6: promote, never wrap
        ("-9223372036854775808 - 1", -9223372036854775809.0),
        ("4 * 18446744073709551615", 4 * 18446744073709551615.0),
    ],
)
def test_arithmetic(text: str, expected: object) -> None:
    result = value(text)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    "text", ["1 / 0", "1 % 0", "1.0 / 0", "1.5 % 0.0", "'x' * 2", "NAN_VALUE() + 1"]
)
def test_invalid_arithmetic_is_nan(text: str) -> None:
    """Q5: division or modulo by zero, and unconvertible strings, give NaN."""
    result = value(text)
    assert isinstance(result, float)
    assert math.isnan(result)


def test_null_operand_gives_null() -> None:
    assert value("/missing * 2") is None
    assert value("-/missing") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 = 2.0", True),
        ("'100' < '99'", True),
        ("20 < '3'", False),
        ("20 < 'xyz'", True),
        ("5 < ''", False),
        ("5 > ''", False),
        ("'' = ''", False),
        ("'' IS NULL", True),
        ("NAN_VALUE() = NAN_VALUE()", False),
        ("NAN_VALUE() != 1", False),
        ("NAN_VALUE() IS NULL", False),
        ("NULL IS NAN", False),
        ("NULL IS NOT NAN", True),
        ("1 == 1 AND 1 <> 2", True),
        ("TRUE = 1 AND FALSE = 0", True),
    ],
)
def test_comparisons(text: str, expected: bool) -> None:
    assert value(text) is expected


def test_comparisons_do_not_chain() -> None:
    from amps.errors import FilterSyntaxError

    with pytest.raises(FilterSyntaxError, match="do not chain"):
        compile_filter("1 < /a < 5")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Left-biased tables of §5.1; /n is a bare NULL condition.
        ("1 AND 1", True),
        ("1 AND 0", False),
        ("1 AND /n", None),
        ("0 AND /n", False),
        ("/n AND 1", None),
        ("/n AND 0", None),
        ("1 OR /n", True),
        ("0 OR /n", None),
        ("/n OR 1", None),
        ("/n OR 0", None),
        ("NOT /n", None),  # Q2: NOT NULL is NULL
        ("NOT 0", True),
        ("NOT NOT 1", True),
    ],
)
def test_three_valued_logic(text: str, expected: object) -> None:
    assert value(text) is expected


def test_filter_matches_only_true() -> None:
    flt = compile_filter("/n OR 1")
    assert flt.matches(Message(b"{}")) is False


@pytest.mark.parametrize(
    ("text", "doc", "expected"),
    [
        ("/a IN (1, 2)", {"a": [3, 2]}, True),
        ("3 IN (/arr)", {"arr": [1, 3]}, True),
        ("/a IN (/b * 2, 100)", {"a": 8, "b": 4}, True),
        ("/a IN ('x', NULL)", {}, False),
        ("/a NOT IN ('x')", {"a": ["x", "y"]}, False),
        ("/a NOT IN (1)", {"a": "1"}, False),
        ("/a IN (1.0)", {"a": 1}, True),
        ("/a IN ('1')", {"a": True}, True),
    ],
)
def test_in(text: str, doc: object, expected: bool) -> None:
    assert matches(text, doc) is expected


@pytest.mark.parametrize(
    ("text", "doc", "expected"),
    [
        ("/a BETWEEN 1 AND 3", {"a": 1}, True),
        ("/a BETWEEN 1 AND 3", {"a": 3.5}, False),
        ("/a NOT BETWEEN 1 AND 3", {"a": 4}, True),
        ("/a NOT BETWEEN 1 AND 3", {}, True),
        ("/t BETWEEN '20240101T000000' AND '20241231T235959'", {"t": "20240615T120000Z"}, True),
        # Q3: per element; [-5, 50] has no element in [0, 10].
        ("/a BETWEEN 0 AND 10", {"a": [-5, 50]}, False),
        ("/a BETWEEN 0 AND 10", {"a": [-5, 5]}, True),
    ],
)
def test_between(text: str, doc: object, expected: bool) -> None:
    assert matches(text, doc) is expected


@pytest.mark.parametrize(
    ("text", "doc", "expected"),
    [
        ("/s LIKE 'LATE'", {"s": "late"}, False),
        ("/s NOT LIKE 'x'", {"s": "abc"}, True),
        ("/s LIKE 'a.c$'", {"s": "zabc"}, True),
        ("/s LIKE '^90\\..*'", {"s": "90.5"}, True),
        ("/s LIKE 'C\\+\\+'", {"s": "C++"}, True),
        ("/s LIKE r'C++'", {"s": "C++"}, True),
        ("/s LIKE 'it\\'s'", {"s": "it's"}, True),
        ("/s LIKE 'b'", {"s": ["a", "b"]}, True),
        ("/s LIKE 'x'", {}, False),
        ("/n LIKE '4'", {"n": 34}, True),
    ],
)
def test_like(text: str, doc: object, expected: bool) -> None:
    assert matches(text, doc) is expected


@pytest.mark.parametrize(
    ("text", "doc", "expected"),
    [
        ("/s BEGINS WITH ('ab', 'x')", {"s": "abc"}, True),
        ("/s BEGINS WITH 'Hello'", {"s": "Hello you"}, True),
        ("/s ENDS WITH ('bc')", {"s": "abc"}, True),
        ("/s NOT ENDS WITH ('bc')", {"s": "abc"}, False),
        ("/s BEGINS WITH ('AB')", {"s": "abc"}, False),
        ("/s BEGINS WITH ('u')", {"s": ["fx", "urgent"]}, True),  # Q12: any element
        ("/s NOT BEGINS WITH ('u')", {}, True),
    ],
)
def test_begins_ends_with(text: str, doc: object, expected: bool) -> None:
    assert matches(text, doc) is expected


@pytest.mark.parametrize(
    ("text", "doc", "expected"),
    [
        ("/a IS NULL", {"a": None}, True),
        ("/a IS NULL", {"a": {"b": 1}}, True),
        ("/a IS NULL", {"a": [None]}, False),  # Q12: only an empty array is NULL
        ("/a IS NOT NULL", {"a": 0}, True),
        ("/a IS NAN", {"a": "x"}, False),
        ("(/a + 0) IS NAN", {"a": "x"}, True),
    ],
)
def test_is_null_and_nan(text: str, doc: object, expected: bool) -> None:
    assert matches(text, doc) is expected


@pytest.mark.parametrize(
    ("text", "doc", "expected"),
    [
        ("/legs[1]/px", {"legs": [{"px": 1}, {"px": 2}]}, 2),  # Q4: inner subscript
        ("/a/b", {"a": {"b": "x"}}, "x"),
        ("/a/b", {"a": [{"b": 1}, {"c": 2}, {"b": [3, [4]]}]}, [1, 3, 4]),
        ("/m[0]", {"m": [[1, 2], [3]]}, 1),  # nested arrays flatten
        ("[/a b] + 1", {"a b": 1}, 2),
        ("/a/@x", {"a": {"@x": 5}}, 5),
        ("/35", {"35": "FIX"}, "FIX"),
        ("/a[0]", {"a": 7}, 7),
        ("/a[1]", {"a": 7}, None),
        ("/é", {"é": 1}, 1),
        ("/a /2", {"a": 8}, 4),
        ("/a/2", {"a": {"2": 9}}, 9),
    ],
)
def test_paths(text: str, doc: object, expected: object) -> None:
    assert value(text, doc) == expected


def test_if_is_lazy_and_takes_false_branch_on_null() -> None:
    assert value("IF(/n, 1, 2)") == 2
    assert value("IF(1 = 1, 'y', 1 / 0)") == "y"
    assert value("IF(/a > 1, /a, NULL)", {"a": 5}) == 5


def test_booleans_and_strings_as_conditions() -> None:
    assert matches("/f", {"f": True}) is True
    assert matches("/f", {"f": "2"}) is True
    assert matches("/f", {"f": "yes"}) is False
    assert matches("/f AND 1", {"f": 0.0}) is False


@pytest.mark.parametrize(
    "data", [b"", b"not json", b"[1, 2]", b"\xff\xfe", b'{"a": 1', b"null", b"[" * 5000]
)
def test_non_json_bodies_read_every_path_as_null(data: bytes) -> None:
    flt = compile_filter("/a IS NULL AND NOT /a = 1 AND /a[0] IS NULL")
    assert flt.matches(Message(data)) is True


def test_integers_beyond_64_bits_still_parse() -> None:
    msg = Message(b'{"a": 123456789012345678901234567890, "b": 1}')
    assert compile_filter("/b = 1 AND /a > 1").matches(msg)


def test_fast_paths_agree_with_general_semantics_for_every_json_type() -> None:
    """The generated fast paths must give the §3.3 answer whatever the field's type."""
    docs: list[object] = [
        {"x": v}
        for v in [None, True, False, 0, 5, 150, -1.5, 150.0, "", "5", "150", "abc", "buy", "NYC",
                  [], [5, 150], ["buy"], ["NYC", "x"], {"k": 1}, float("1e308")]
    ]  # fmt: skip
    docs.append({})
    texts = [
        "/x > 100", "/x >= 5", "/x < 100", "/x <= 5", "100 < /x", "/x = 5", "/x != 5",
        "/x = 'buy'", "/x != 'buy'", "/x < 'buy'", "/x <= 'buy'", "/x > 'buy'", "/x >= 'buy'",
        "/x IN ('NYC', 'LDN')", "/x NOT IN ('NYC', 'LDN')", "/x IN (5, 150)", "/x = '5'",
    ]  # fmt: skip
    from amps.expr import parse_expression
    from amps.expr.reference import evaluate

    for text in texts:
        flt = compile_filter(text)
        tree = parse_expression(text)
        for doc in docs:
            msg = Message.from_obj(doc)
            assert flt.matches(msg) is (evaluate(tree, msg) is True), (text, doc)
            # The same predicate inside a non-statement context (an OR) goes the expression way.
            wrapped = compile_filter(f"0 = 1 OR {text}")
            assert wrapped.matches(msg) is flt.matches(msg), (text, doc)
