"""Fuzzing the parser (h11 style): any text is a compiled filter or FilterSyntaxError, and a
compiled filter evaluates over any message without raising (Q14)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps.errors import FilterSyntaxError
from amps.expr import EvalContext, ExprKind, Message, compile_filter, compile_priority

MESSAGES = [
    Message(b'{"a": 1, "b": "x", "c": [1, "2", null], "d": {"e": 2.5}, "f": true}', "T", "b|1|"),
    Message(b'{"a": "", "b": [], "c": {"x": 1}, "d": [[1], [2, [3]]]}'),
    Message(b"not json at all"),
    Message(b'{"a": 18446744073709551615, "b": -9223372036854775808, "c": 1e308}'),
]
CTX = EvalContext(now_us=1, client_name="c")

TOKENS = [
    "/a", "/b", "/c", "/d/e", "/c[0]", "/c[9]", "[/a]", "1", "0", "-1", "2.5", "1e3", "'x'", "'2'",
    "''", "r'x+'", '"y"', "NULL", "TRUE", "FALSE", "NAN", "AND", "OR", "NOT", "IN", "BETWEEN",
    "LIKE", "IS", "BEGINS", "ENDS", "WITH", "MOD", "IF", "(", ")", ",", "=", "==", "!=", "<>", "<",
    "<=", ">", ">=", "+", "-", "*", "/", "%", "LENGTH", "CONCAT", "COALESCE", "SUBSTR", "UPPER",
    "ARRAY_MAX", "REGEXP_MATCH", "WIDTH_BUCKET", "ROUND", "CRC32", "TOPIC_NAME", "BOOKMARK",
    "UNIX_TIMESTAMP", "'(a+)+'", "'('", "[", "]", "@", "\\", "'\\x4", "\x00", "é",
]  # fmt: skip

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _exercise(text: str) -> None:
    refused: FilterSyntaxError | None = None
    try:
        flt = compile_filter(text)
    except FilterSyntaxError as error:
        refused = error
    if refused is not None:
        assert 1 <= refused.column <= len(text) + 1
        assert refused.expression == text
        assert refused.detail
        return
    for msg in MESSAGES:
        assert type(flt.matches(msg, CTX)) is bool
        flt.evaluate(msg, CTX)


@FUZZ
@given(st.text(max_size=60))
def test_random_text(text: str) -> None:
    _exercise(text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=25), st.sampled_from([" ", ""]))
def test_random_token_streams(tokens: list[str], separator: str) -> None:
    _exercise(separator.join(tokens))


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=15), st.sampled_from(list(ExprKind)))
def test_every_kind_accepts_or_refuses_cleanly(tokens: list[str], kind: ExprKind) -> None:
    text = " ".join(tokens)
    try:
        if kind is ExprKind.PRIORITY:
            priority = compile_priority(text)
            for msg in MESSAGES:
                assert 0 <= priority.key(msg, CTX) <= 2**64 - 1
        else:
            compile_filter(text, kind)
    except FilterSyntaxError:
        pass


@FUZZ
@given(st.binary(max_size=200))
def test_random_message_bodies(data: bytes) -> None:
    flt = compile_filter("/a = 1 OR /b/c[0] LIKE 'x' OR LENGTH(/d) > 2 OR /e IN ('q', 3)")
    assert type(flt.matches(Message(data))) is bool
