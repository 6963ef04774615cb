"""Functions of AMPS-EXPRESSIONS.md §6 and where each context allows them (§6.10, §7)."""

from __future__ import annotations

import math

import pytest

from amps.errors import FilterSyntaxError
from amps.expr import EvalContext, ExprKind, Message, check_expression, compile_filter

from .helpers import value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("INSTR('abcabc', 'ca')", 3),
        ("INSTR('abc', 'z')", 0),
        ("INSTR_I('ABC', 'b')", 2),
        ("STREQUAL_I('AbC', 'aBc')", True),
        ("LENGTH('hello')", 5),
        ("CONCAT('a', NULL, 1, 'b')", "a1b"),  # Q11: NULL adds nothing
        ("CONCAT(NULL)", None),
        ("UPPER('abé')", "ABé"),  # ASCII only
        ("LOWER('ABC')", "abc"),
        ("REPLACE('a-b-c', '-', '+')", "a+b+c"),
        ("REGEXP_REPLACE('abcXYZabc', 'b.*b', '-')", "a-c"),
        ("REGEXP_REPLACE('abc', 'b', '\\\\1')", "a\\1c"),
        ("REGEXP_MATCH('order-123', '[0-9]+')", "123"),
        ("REGEXP_MATCH('abc', '[0-9]+')", None),
        ("SUBSTR('abcdef', 2, 3)", "bcd"),
        ("SUBSTR('abcdef', -2)", "ef"),
        ("SUBSTR('abcdef', -10, 2)", "ab"),
        ("SUBSTR('abc', 5)", None),
        ("LEFT('abcdef', 2)", "ab"),
        ("RIGHT('abcdef', 2)", "ef"),
        ("TRIM('  ab  ')", "ab"),
        ("LTRIM('xxabx', 'x')", "abx"),
        ("RTRIM('xxabx', 'x')", "xxab"),
        ("REVERSE('abc')", "cba"),
        ("COALESCE(NULL, '', 3)", 3),
        ("CHAR_VALUE(65)", "A"),
        ("CHAR_VALUE(300)", None),
        ("MD5('abc')", "900150983cd24fb0d6963f7d28e17f72"),
        ("TRUE_VALUE()", True),
        ("FALSE_VALUE()", False),
        ("ABS(-3)", 3),
        ("SIGN(-2.5)", -1),
        ("CEILING(1.2)", 2),
        ("FLOOR(-1.2)", -2),
        ("ROUND(2.5)", 3.0),
        ("ROUND(-2.5)", -3.0),
        ("ROUND(1234.5, -2)", 1200.0),
        ("ROUND(1250, -2)", 1300),
        ("ROUND(1.005, 1)", 1.0),
        ("GREATEST(1, 'x', 3)", 3),
        ("LEAST(4, 2.5)", 2.5),
        ("POWER(2, 10)", 1024.0),
        ("SQRT(16)", 4.0),
        ("LOG10(1000)", 3.0),
        ("WIDTH_BUCKET(5, 0, 10, 5)", 3),
        ("WIDTH_BUCKET(-1, 0, 10, 5)", 0),
        ("ARRAY_COUNT(/v)", 3),
        ("ARRAY_COUNT(/missing)", 0),
        ("ARRAY_MIN(/v)", 5),
        ("ARRAY_SUM(/v)", 52),
        ("ARRAY_SUM(/w)", 3),
        ("ARRAY_TO_STRING(/w, ',', '-')", "1,-,2"),
        ("STRFTIME('%Y-%m-%dT%H:%M:%S.%03f', 1700000000.123)", "2023-11-14T22:13:20.123"),
        ("STRFTIME('%Y%m%d', '20240102T030405Z')", "20240102"),
        ("STRPTIME('2023-11-14 22:13:20', '%Y-%m-%d %H:%M:%S')", 1700000000.0),
        ("STRFTIME('%99999999Y', 0)", None),
    ],
)
def test_function(text: str, expected: object) -> None:
    assert value(text, {"v": [5, 40, 7], "w": [1, None, 2]}) == expected


@pytest.mark.parametrize(
    "text", ["SQRT(-1)", "LN(0)", "EXP(10000)", "WIDTH_BUCKET(1, 5, 5, 3)", "NAN_VALUE()"]
)
def test_out_of_domain_is_nan(text: str) -> None:
    result = value(text)
    assert isinstance(result, float)
    assert math.isnan(result)


def test_message_functions() -> None:
    msg = Message(
        b'{"a":1}', "ORDERS", "p|1|", correlation_id="c-1", lease_count=3, last_leased_us=2_500_000
    )
    flt = compile_filter(
        "TOPIC_NAME() = 'ORDERS' AND BOOKMARK() = 'p|1|' AND MESSAGE_SIZE() = 7 "
        "AND CORRELATION_ID() = 'c-1' AND LEASE_COUNT() = 3 AND LAST_LEASED() = 2.5"
    )
    assert flt.matches(msg)
    assert compile_filter("BOOKMARK() IS NULL AND LEASE_COUNT() IS NULL").matches(Message(b"{}"))
    assert compile_filter("MESSAGE_SIZE()").evaluate(Message.from_obj({"a": 1})) == 7


def test_context_functions_read_the_eval_context() -> None:
    ctx = EvalContext(now_us=1_700_000_000_000_000, client_name="c", user_id="u", instance_name="i")
    flt = compile_filter(
        "UNIX_TIMESTAMP() = 1700000000 AND CLIENT_NAME() = 'c' AND USER() = 'u' "
        "AND AMPS_INSTANCE_NAME() = 'i' AND AMPS_GROUP_NAME() IS NULL"
    )
    assert flt.matches(Message(b"{}"), ctx)
    assert not compile_filter("CLIENT_NAME() IS NOT NULL").matches(Message(b"{}"))


def test_topic_only_filter_never_parses_the_body() -> None:
    msg = Message(b"{not json", "T")
    assert compile_filter("TOPIC_NAME() = 'T'").matches(msg)
    assert msg._doc is None


@pytest.mark.parametrize("kind", [ExprKind.QUEUE_FILTER, ExprKind.BARRIER, ExprKind.PRIORITY])
@pytest.mark.parametrize("call", ["UNIX_TIMESTAMP()", "CLIENT_NAME()", "USER()", "LEASE_COUNT()"])
def test_config_contexts_refuse_non_deterministic_client_and_lease_functions(
    kind: ExprKind, call: str
) -> None:
    """§6.10, §7.3: queue Filter, Priority and BarrierExpression are deterministic only."""
    with pytest.raises(FilterSyntaxError) as info:
        check_expression(f"/a = 1 AND {call} IS NOT NULL", kind)
    assert info.value.column == 12


@pytest.mark.parametrize("kind", [ExprKind.FILTER, ExprKind.SOW_DELETE_FILTER])
def test_filters_and_sow_delete_allow_them(kind: ExprKind) -> None:
    """Q10: `sow_delete` filters may use LEASE_COUNT() and non-deterministic functions."""
    check_expression("LEASE_COUNT() >= 5 AND UNIX_TIMESTAMP() > 0", kind)


@pytest.mark.parametrize(
    ("text", "detail", "column"),
    [
        ("NOPE(1)", "unknown function NOPE", 1),
        ("/a = LENGTH()", "LENGTH takes 1 argument, not 0", 6),
        ("SUBSTR('a')", "SUBSTR takes 2 to 3 arguments, not 1", 1),
        ("CONCAT()", "CONCAT takes at least 1 arguments, not 0", 1),
        ("IF(1, 2)", "IF takes 3 arguments, not 2", 1),
        ("REGEXP_MATCH('a', /p)", "the pattern of REGEXP_MATCH must be a string literal", 19),
    ],
)
def test_function_errors(text: str, detail: str, column: int) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_filter(text)
    assert info.value.detail == detail
    assert info.value.column == column


def test_function_names_are_case_insensitive() -> None:
    """Q8: keywords and function names ignore case."""
    assert value("length('abc') + Length('a')") == 4
