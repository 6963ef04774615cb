"""Compiled evaluation equals the slow reference walker (amps/expr/reference.py) on random
expressions and documents: fast paths and the flat AND/OR forms change speed, never results."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps.expr import EvalContext, Message, compile_filter, parse_expression
from amps.expr.reference import evaluate, truth_of
from amps.expr.values import same

FIELDS = ["/a", "/b", "/c", "/n/x", "/arr", "/arr[1]", "/objs/v"]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([0.5, -2.0, 1e300, 18446744073709551615, -9223372036854775808]),
    st.sampled_from(["", "x", "buy", "5", "2.0", "NYC", "abc", "-3"]),
)
JSON_VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))
DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "a": JSON_VALUES,
        "b": JSON_VALUES,
        "c": JSON_VALUES,
        "n": st.fixed_dictionaries({}, optional={"x": JSON_VALUES}),
        "arr": st.lists(SCALARS, max_size=3),
        "objs": st.lists(st.fixed_dictionaries({}, optional={"v": SCALARS}), max_size=3),
    },
)
LITERALS = st.sampled_from(
    ["1", "0", "-2", "2.5", "'x'", "'buy'", "'5'", "''", "NULL", "TRUE", "'NYC'", "100"]
)
CMP = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])


def _predicates(values: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda a, op, b: f"{a} {op} {b}", values, CMP, values),
        st.builds(lambda a, ms, neg: f"{a} {neg}IN ({', '.join(ms)})", values,
                  st.lists(values, min_size=1, max_size=3), st.sampled_from(["", "NOT "])),
        st.builds(lambda a, lo, hi: f"{a} BETWEEN {lo} AND {hi}", values, values, values),
        st.builds(lambda a, p: f"{a} LIKE {p}", values, st.sampled_from(["'x'", "'^b'", "'5$'"])),
        st.builds(lambda a, w: f"{a} {w} ('b', 'x')", values,
                  st.sampled_from(["BEGINS WITH", "ENDS WITH"])),
        st.builds(lambda a, w: f"{a} IS {w}", values,
                  st.sampled_from(["NULL", "NOT NULL", "NAN", "NOT NAN"])),
    )  # fmt: skip


def _values() -> st.SearchStrategy[str]:
    base = st.one_of(st.sampled_from(FIELDS), LITERALS)
    return st.recursive(
        base,
        lambda inner: st.one_of(
            st.builds(lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from("+-*/%"), inner),
            st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["LENGTH", "UPPER", "ABS"]), inner),
            st.builds(lambda a, b: f"COALESCE({a}, {b})", inner, inner),
            st.builds(lambda c, a, b: f"IF({c}, {a}, {b})", inner, inner, inner),
        ),
        max_leaves=4,
    )


def _some(inner: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    return st.lists(inner, min_size=2, max_size=4)


def _conditions() -> st.SearchStrategy[str]:
    values = _values()
    base = st.one_of(_predicates(values), values)
    return st.recursive(
        base,
        lambda inner: st.one_of(
            st.builds(lambda items: "(" + " AND ".join(items) + ")", _some(inner)),
            st.builds(lambda items: "(" + " OR ".join(items) + ")", _some(inner)),
            st.builds(lambda a: f"NOT {a}", inner),
        ),
        max_leaves=6,
    )  # fmt: skip


@settings(max_examples=250, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(_conditions(), st.lists(DOCUMENTS, min_size=1, max_size=4))
def test_compiled_equals_reference(text: str, docs: list[dict[str, object]]) -> None:
    tree = parse_expression(text)
    flt = compile_filter(text)
    top = " AND ".join([text, "1 = 1"])  # the same expression under the statement form
    wrapped = compile_filter(top)
    for doc in docs:
        msg = Message.from_obj(doc)
        expected = evaluate(tree, msg)
        assert same(flt.evaluate(msg), expected), (text, doc)
        assert flt.matches(msg) is (truth_of(tree, msg, EvalContext()) is True), (text, doc)
        assert wrapped.matches(msg) is flt.matches(msg), (text, doc)
