"""Syntax: tokens, precedence, error columns and sentences, limits (AMPS-EXPRESSIONS.md §2, §4)."""

from __future__ import annotations

import pytest

from amps.errors import FilterSyntaxError
from amps.expr import Message, compile_filter, parse_expression, render
from amps.expr.lexer import MAX_EXPRESSION_CHARS
from amps.expr.parser import MAX_DEPTH, MAX_PATTERN_CHARS


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/a = 1 OR /b = 2 AND /c = 3", "((/a = 1) OR ((/b = 2) AND (/c = 3)))"),
        ("NOT /a IN (1, 2)", "(NOT (/a IN (1, 2)))"),
        ("/a NOT IN (1)", "(/a NOT IN (1))"),
        ("NOT /f IS NULL", "(NOT (/f IS NULL))"),
        ("1 + 2 * 3 - 4", "((1 + (2 * 3)) - 4)"),
        ("/p*/q", "(/p * /q)"),
        ("/a /2", "(/a / 2)"),
        ("/a/2", "/a/2"),
        ("/qty-1 = 9", "(/qty-1 = 9)"),
        ("/q BETWEEN 1 AND 2 AND /s", "((/q BETWEEN 1 AND 2) AND /s)"),
        ("/s LIKE r'1+1'", "(/s LIKE r'1+1')"),
        ("'it\\'s'", "'it\\'s'"),
        ("\"dq\" = 'dq'", "('dq' = 'dq')"),
        ("/a is not nan", "(/a IS NOT NAN)"),
        ("-5", "-5"),
        ("- /a", "(-/a)"),
        ("[/x y][2]", "[/x y][2]"),
        ("true or false", "(true OR false)"),
    ],
)
def test_parse_renders(text: str, shown: str) -> None:
    assert render(parse_expression(text)) == shown


@pytest.mark.parametrize(
    ("text", "column", "detail"),
    [
        ("(/a = 1", 8, "expected ')' but found end of expression"),
        ("/a = 1)", 7, "unbalanced ')'"),
        ("/a = ", 6, "expected a value but the expression ended"),
        ("/a == == 1", 7, "expected a value but found '=='"),
        ("/a = 1 /b", 9, "unknown word 'b': fields are written /name"),
        ("/a = 1 2", 8, "expected an operator or the end but found '2'"),
        ("/a = 'x", 6, "unterminated string: expected '"),
        ("/a = .5", 6, "a number needs a digit before '.'"),
        ("/a = 5.", 7, "a number needs a digit after '.'"),
        ("/a = 0x1F", 7, "unexpected character 'x' after a number"),
        ("/a LIKE /b", 9, "the pattern of LIKE must be a string literal"),
        ("/a LIKE '(.)\\1'", 9, "unsupported regular expression (invalid escape sequence: \\1)"),
        ("/a LIKE '(?x) a'", 9, "unsupported regular expression (invalid perl operator: (?x)"),
        ("/a[-1] = 1", 3, "a subscript must be a non-negative integer in brackets, like [0]"),
        ("/ = 1", 2, "expected a field name after '/'"),
        ("/a NOT NULL", 4, "write IS NOT NULL (the shorthand 'NOT NULL' is not accepted)"),
        ("/a IS 5", 7, "expected NULL or NAN after IS but found '5'"),
        ("/a IN ()", 8, "expected at least one value in the list"),
        ("/a BETWEEN 1 OR 2", 14, "expected AND but found 'OR'"),
        ("/a BEGINS WITH (/b)", 17, "BEGINS WITH and ENDS WITH take string literals"),
        ("price > 1", 1, "unknown word 'price': fields are written /name"),
        ("/a = AND", 6, "expected a value but found the keyword AND"),
        ("/a = 1 # 2", 8, "unexpected character '#'"),
        ("   ", 1, "the expression is empty"),
        ("[x] = 1", 1, "expected '/' after '[' (a bracketed field is written [/name])"),
    ],
)
def test_errors_name_the_column(text: str, column: int, detail: str) -> None:
    """Q14: every bad expression is a FilterSyntaxError with a 1-based column and a sentence."""
    with pytest.raises(FilterSyntaxError) as info:
        compile_filter(text)
    assert (info.value.column, info.value.detail) == (column, detail)
    assert info.value.expression == text
    assert str(info.value) == f"{detail} at column {column}"


def test_depth_is_bounded() -> None:
    compile_filter("(" * (MAX_DEPTH - 1) + "1" + ")" * (MAX_DEPTH - 1))
    with pytest.raises(FilterSyntaxError, match="nested more than"):
        compile_filter("(" * 5000 + "1" + ")" * 5000)
    with pytest.raises(FilterSyntaxError, match="nested more than"):
        compile_filter("NOT " * 1000 + "1")
    with pytest.raises(FilterSyntaxError, match="nested more than"):
        compile_filter(" + ".join(["1"] * 500))


def test_long_flat_conjunctions_are_fine() -> None:
    """AND/OR chains are n-ary nodes, so their length does not count as depth."""
    empty = Message(b"{}")
    assert compile_filter(" AND ".join(f"/f{i} IS NULL" for i in range(2000))).matches(empty)
    assert not compile_filter(" OR ".join(f"/f{i}" for i in range(2000))).matches(empty)
    assert compile_filter("/x = 1 OR " + " AND ".join(["/a IS NULL"] * 2000)).matches(empty)


def test_lengths_are_bounded() -> None:
    with pytest.raises(FilterSyntaxError, match="longer than"):
        compile_filter("1" + " " * MAX_EXPRESSION_CHARS)
    with pytest.raises(FilterSyntaxError, match="pattern longer than"):
        compile_filter("/a LIKE '" + "a" * (MAX_PATTERN_CHARS + 1) + "'")


def test_pathological_regex_is_linear_time() -> None:
    """RE2 (Q13): the classic catastrophic pattern runs in linear time."""
    flt = compile_filter("/s LIKE '^(a+)+$'")
    assert not flt.matches(Message.from_obj({"s": "a" * 100_000 + "b"}))


def test_string_escapes() -> None:
    from .helpers import value

    assert value("'a\\tb\\x41\\101\\q'") == "a\tbAAq"
    assert value("r'a\\tb'") == "a\\tb"
    assert value("''") is None


def test_huge_integer_literal_becomes_double() -> None:
    from .helpers import value

    assert value("99999999999999999999999") == 1e23
