"""The 60 test vectors of AMPS-EXPRESSIONS.md §9, data-driven.

Filters: True/False is match/no match. ("value", v): the expression's value. ERROR: the expression
is refused with FilterSyntaxError (vector 39: backreferences need a backtracking engine, refused by
our RE2 choice, Q13; see docs/reference/expressions.md).
"""

from __future__ import annotations

import pytest

from amps.errors import FilterSyntaxError
from amps.expr import ExprKind, Message, compile_filter, compile_priority
from amps.expr.values import same

ERROR = "error"

MAIN_VECTORS: list[tuple[int, str, str, object]] = [
    (1, '{"qty":"250"}', "/qty = 250", True),
    (2, '{"qty":"100"}', "/qty > '99'", False),
    (3, '{"qty":100}', "/qty > '99'", True),
    (4, '{"px":"2.0"}', "/px = '2.00'", False),
    (5, '{"a":5}', "/a < 'abc'", True),
    (6, '{"a":5}', "('abc' * /a) IS NAN", True),
    (7, '{"s":""}', "/s IS NULL", True),
    (8, '{"f":true}', "/f = 1", True),
    (9, '{"big":18446744073709551610}', "/big > 9223372036854775807", True),
    (10, '{"a":3,"b":4}', "/a / /b = 0", True),
    (11, '{"a":3.0,"b":4}', "/a / /b = 0.75", True),
    (12, '{"a":-7,"b":2}', "/a / /b = -3", True),
    (13, '{"a":-7}', "/a % 3 = -1", True),
    (14, '{"a":10}', "(/a / 0) IS NAN", True),
    (15, '{"a":10}', "/a / 0 >= 0 OR /a / 0 < 0", False),
    (16, '{"a":10}', "(/a + /missing) IS NULL", True),
    (17, '{"p":2,"q":3}', "/p*/q = 6", True),
    (18, '{"qty":5,"qty-1":9}', "/qty-1 = 9", True),
    (19, '{"x":2}', "/x = 1 OR /x = 2 AND /x = 3", False),
    (20, '{"x":2}', "/x = 2 OR /missing = 1", True),
    (21, '{"x":2}', "/missing != 1", False),
    (22, '{"x":2}', "/missing = 1 OR /x = 2", True),
    (23, '{"x":2}', "NOT (/missing = 1)", True),
    (24, '{"x":2}', "/missing NOT IN (1, 2)", True),
    (25, '{"x":2}', "NOT /missing IS NULL", False),
    (26, '{"flag":1}', "/nope AND /flag = 1", False),
    (27, '{"flag":1}', "/flag = 1 AND /nope", False),
    (28, '{"x":2}', "/x = 2 and not /x in (5)", True),
    (29, '{"sym":"ibm"}', "/sym IN ('MSFT', 'IBM')", False),
    (30, '{"n":1}', "/n IN ('1', 'x')", True),
    (31, '{"q":200.0}', "/q BETWEEN 100 AND 200", True),
    (32, '{"q":150}', "/q BETWEEN 200 AND 100", False),
    (33, '{"q":150,"s":"x"}', "/q BETWEEN 100 AND 200 AND /s = 'x'", True),
    (34, '{"s":"Pay late fee"}', "/s LIKE 'late'", True),
    (35, '{"s":"Pay late fee"}', "/s LIKE '^late'", False),
    (36, '{"s":"Pay late fee"}', "/s LIKE '(?i)^PAY'", True),
    (37, '{"t":"11"}', "/t LIKE r'1+1'", False),
    (38, '{"code":34}', "/code LIKE '^3'", True),
    (39, '{"s":"aab"}', "/s LIKE '(.)\\1'", ERROR),
    (40, '{"tags":["fx","urgent"]}', "/tags != 'fx'", True),
    (41, '{"tags":["fx","urgent"]}', "NOT /tags = 'fx'", False),
    (42, '{"v":[5,40,7]}', "/v > 30", True),
    (43, '{"v":[5,40,7]}', "/v + 0 > 30", False),
    (44, '{"v":[5,40,7]}', "/v[3] IS NULL", True),
    (45, '{"v":[]}', "/v IS NULL", True),
    (46, '{"legs":[{"px":10},{"px":20}]}', "/legs/px[1] > 15", True),
    (47, '{"order":{"qty":250}}', "/order/Qty IS NULL", True),
    (48, '{"d":[3,"owl",12]}', "ARRAY_MAX(/d)", ("value", "owl")),
    (49, '{"v":[5,40,7]}', "COALESCE(/v, 0)", ("value", 5)),
    (50, '{"q":0}', "IF(/missing > 1, 'big', 'small')", ("value", "small")),
    (51, "{}", "REGEXP_MATCH('order-123', '[0-9]+') = 123", True),
    (52, '{"p":100}', "WIDTH_BUCKET(/p, 0, 100, 10)", ("value", 11)),
]


@pytest.mark.parametrize(("number", "data", "text", "expected"), MAIN_VECTORS)
def test_main_vector(number: int, data: str, text: str, expected: object) -> None:
    """§9 vectors 1-52 (22-24 follow Reading A, §5.1)."""
    msg = Message(data.encode())
    if expected == ERROR:
        with pytest.raises(FilterSyntaxError):
            compile_filter(text)
        return
    flt = compile_filter(text)
    if isinstance(expected, tuple):
        assert same(flt.evaluate(msg), expected[1]), (number, flt.evaluate(msg))
    else:
        assert flt.matches(msg) is expected, number


def test_vector_count_is_sixty() -> None:
    assert len(MAIN_VECTORS) + len(PRIORITY_VECTORS) + 5 == 60  # + P4, E1, E2, C1, C2


PRIORITY_VECTORS: list[tuple[str, str, str, int]] = [
    ("P1", "/price * /qty", '{"price":2.5,"qty":4}', 10),
    ("P2", "/p", '{"p":"high"}', 0),
    ("P3", "/p", "{}", 0),
]


@pytest.mark.parametrize(("name", "text", "data", "key"), PRIORITY_VECTORS)
def test_priority_vector(name: str, text: str, data: str, key: int) -> None:
    """A2: the key is unsigned 64-bit; NULL, NaN and non-numeric values are lowest."""
    priority = compile_priority(text)
    msg = Message(data.encode())
    assert priority.key(msg) == key, name
    if key == 0:
        assert priority.rank(msg) < priority.rank(Message(b'{"p":0,"price":0,"qty":0}'))


def test_p2_p3_nan_and_null_sort_after_every_numeric_priority() -> None:
    """A2 (P2, P3): NaN and NULL priorities are delivered after every numeric one, even 0."""
    priority = compile_priority("/p")
    ranks = [priority.rank(Message(d)) for d in (b'{"p":0}', b'{"p":"high"}', b"{}", b'{"p":5}')]
    assert sorted(ranks, reverse=True) == [(1, 5), (1, 0), (0, 0), (0, 0)]


def test_p4_barrier_zero_is_not_null() -> None:
    """A3 (P4): `/sync IS NOT NULL` makes {"sync":0} a barrier message."""
    barrier = compile_filter("/sync IS NOT NULL", ExprKind.BARRIER)
    assert barrier.matches(Message(b'{"sync":0}'))


def test_e1_like_pattern_must_be_a_literal() -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_filter("/a LIKE /b")
    assert info.value.column == 9


def test_e2_queue_filter_rejects_non_deterministic() -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_filter("UNIX_TIMESTAMP() > 0", ExprKind.QUEUE_FILTER)
    assert info.value.column == 1
    assert "not deterministic" in info.value.detail


@pytest.mark.parametrize(
    ("text", "value"),
    [("CRC32('123456789')", 3808858755), ("CRC64('123456789')", 0xE9C6D914C4B8D9CA)],
)
def test_c1_c2_checksums(text: str, value: int) -> None:
    assert compile_filter(text).evaluate(Message(b"{}")) == value
