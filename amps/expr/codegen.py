"""Compile a checked tree into Python source, then into one function with `compile()`.

Why source rather than closures: a filter then costs one Python call, with no per-node call
overhead and no tree walk per message. The common shapes (a top-level field compared with a
literal, IN over literals) get a typed fast path; every other case calls a total helper from
`values`/`runtime`, so the generated code can never raise on a message. Every name the code uses
is bound in its own namespace; no text from the expression reaches the source except through
`repr()` of a str or int.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from amps.errors import FilterSyntaxError
from amps.expr import nodes as n
from amps.expr import runtime, values
from amps.expr.jsondoc import Array
from amps.expr.message import EvalContext
from amps.expr.paths import read_path
from amps.expr.regex import compile_pattern
from amps.expr.registry import FUNCTIONS, Category

_PY_OPS = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# String fast paths: an empty str is NULL, so it must never satisfy the comparison.
_TEXT_TEMPLATES = {
    "=": "{v} == {k}",
    "!=": "'' != {v} != {k}",
    "<": "'' < {v} < {k}",
    "<=": "'' < {v} <= {k}",
    ">": "{v} > {k}",
    ">=": "{v} >= {k}",
}
_ARITH_NAMES = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}

_BASE_NAMESPACE: dict[str, object] = {
    "_n": values.norm,
    "_path": read_path,
    "_cmp": values.compare_any,
    "_in": values.in_any,
    "_between": values.between_any,
    "_affix": values.affix_any,
    "_isnan": values.nan_any,
    "_truth": values.truth,
    "_like": runtime.like_any,
    "_not3": runtime.not3,
    "_neg": values.negate,
    "_pos": values.plus,
    "_add": values.add,
    "_sub": values.subtract,
    "_mul": values.multiply,
    "_div": values.divide,
    "_mod": values.modulo,
    "_pkey": runtime.priority_key,
    "_prank": runtime.priority_rank,
    "_CTX": EvalContext(),
    # Raw field values may be simdjson proxies (jsondoc): an Array is an array value too.
    "_ARR": Array,
    "_SEQ": frozenset({list, Array}),
    "__builtins__": {
        "type": type,
        "int": int,
        "float": float,
        "str": str,
        "list": list,
        "KeyError": KeyError,
        "TypeError": TypeError,
    },
}


def _literal_class(node: n.Node) -> str:
    """'num' for a numeric literal, 'text' for a non-numeric string literal, else ''."""
    if not isinstance(node, n.Literal):
        return ""
    value = node.value
    if type(value) is int or (type(value) is float and value == value):
        return "num"
    if type(value) is str and values.is_nan(values.text_to_number(value)):
        return "text"
    return ""


def _simple_field(node: n.Node) -> str | None:
    """The field name of a one-step path without subscript (read with one dict.get)."""
    if isinstance(node, n.Path) and len(node.steps) == 1 and node.steps[0].index is None:
        return node.steps[0].name
    return None


@dataclass
class _Generator:
    namespace: dict[str, object] = field(default_factory=lambda: dict(_BASE_NAMESPACE))
    counter: int = 0
    uses_doc: bool = False
    uses_ctx: bool = False

    def const(self, obj: object) -> str:
        name = f"_k{self.counter}"
        self.counter += 1
        self.namespace[name] = obj
        return name

    def temp(self) -> str:
        self.counter += 1
        return f"_t{self.counter}"

    def literal(self, value: values.Value) -> str:
        if value is None or type(value) in (int, str, bool):
            return repr(value)
        return self.const(value)

    def get(self, name: str) -> str:
        self.uses_doc = True
        return f"d.get({name!r})"

    # -- values --------------------------------------------------------------------------------

    def value(self, node: n.Node) -> str:
        if isinstance(node, (*n.PREDICATES, n.And, n.Or, n.Not)):
            return self.truth(node)
        match node:
            case n.Literal(value=value):
                return self.literal(value)
            case n.Path(steps=steps):
                name = _simple_field(node)
                if name is not None:
                    return f"_n({self.get(name)})"
                self.uses_doc = True
                return f"_path(d, {self.const(steps)})"
            case n.Unary(op=op, operand=operand):
                return f"{'_neg' if op == '-' else '_pos'}({self.value(operand)})"
            case n.Arith(op=op, left=left, right=right):
                return f"{_ARITH_NAMES[op]}({self.value(left)}, {self.value(right)})"
            case n.If(condition=condition, then=then, otherwise=otherwise):
                test = self.truth(condition)
                if not _strict(condition):
                    test = f"({test}) is True"
                return f"({self.value(then)} if {test} else {self.value(otherwise)})"
            case n.Call():
                return self.call(node)
        raise AssertionError(f"no value for {node!r}")

    def call(self, node: n.Call) -> str:
        spec = FUNCTIONS[node.name]
        if spec.category is not Category.PURE:
            self.uses_ctx = True
            return f"{self.const(spec.impl)}(msg, ctx)"
        impl = spec.impl
        if spec.takes_pattern:
            impl = partial(impl, compile_pattern(node.pattern))
        args = ", ".join(self.value(arg) for arg in node.args)
        return f"{self.const(impl)}({args})"

    # -- truth values (True / False / None) ----------------------------------------------------

    def truth(self, node: n.Node) -> str:
        match node:
            case n.Compare(op=op, left=left, right=right):
                fast = self.compare_fast(op, left, right) or self.compare_fast(
                    _FLIPPED[op], right, left
                )
                return fast or f"_cmp({op!r}, {self.value(left)}, {self.value(right)})"
            case n.In(subject=subject, members=members, negated=negated):
                listed = "".join(self.value(m) + ", " for m in members)
                found = self.in_fast(subject, members) or f"_in({self.value(subject)}, ({listed}))"
                return f"(not {found})" if negated else found
            case n.Between(subject=subject, low=low, high=high, negated=negated):
                found = f"_between({self.value(subject)}, {self.value(low)}, {self.value(high)})"
                return f"(not {found})" if negated else found
            case n.Like(subject=subject, pattern=pattern, negated=negated):
                found = f"_like({self.const(compile_pattern(pattern))}, {self.value(subject)})"
                return f"(not {found})" if negated else found
            case n.Affix(subject=subject, affixes=affixes, at_start=at_start, negated=negated):
                found = f"_affix({self.value(subject)}, {self.const(affixes)}, {at_start})"
                return f"(not {found})" if negated else found
            case n.IsNull(subject=n.Literal(value=constant), negated=negated):
                return repr((constant is None) != negated)  # `1 is None` would be a SyntaxWarning
            case n.IsNull(subject=subject, negated=negated):
                return f"({self.value(subject)} is {'not ' if negated else ''}None)"
            case n.IsNan(subject=subject, negated=negated):
                found = f"_isnan({self.value(subject)})"
                return f"(not {found})" if negated else found
            case n.And(items=items):
                return self.chain(items, stop_unless=True)
            case n.Or(items=items):
                return self.chain(items, stop_unless=False)
            case n.Not(item=item):
                inner = self.truth(item)
                return f"(not {inner})" if _strict(item) else f"_not3({inner})"
            case n.Literal(value=bool() as flag):
                return repr(flag)
        return f"_truth({self.value(node)})"

    def chain(self, items: tuple[n.Node, ...], stop_unless: bool) -> str:
        """Left-biased AND/OR of §5.1: the first item that is not `stop_unless` decides."""
        if all(_strict(item) for item in items):
            word = " and " if stop_unless else " or "
            return "(" + word.join(self.truth(item) for item in items) + ")"
        # Flat form (one nesting level whatever the length): remember the deciding value.
        t = self.temp()
        tests = " or ".join(f"({t} := {self.truth(item)}) is not {stop_unless}" for item in items)
        return f"({t} if ({tests}) else {stop_unless})"

    # -- fast paths ----------------------------------------------------------------------------

    def compare_fast(self, op: str, left: n.Node, right: n.Node) -> str | None:
        name = _simple_field(left)
        kind = _literal_class(right)
        if name is None or not kind:
            return None
        assert isinstance(right, n.Literal)
        v, t, k = self.temp(), self.temp(), self.literal(right.value)
        slow = f"_cmp({op!r}, _n({v}), {k})"
        if kind == "num":
            test = f"({v} != {k} and {v} == {v})" if op == "!=" else f"{v} {_PY_OPS[op]} {k}"
            guard = f"({t} := type({v} := {self.get(name)})) is int or {t} is float"
            return f"({test} if {guard} else {slow})"
        if op == "=":
            # Only an equal str (or an array holding one) can equal a non-numeric string literal.
            return f"(({v} := {self.get(name)}) == {k} or (type({v}) in _SEQ and {slow}))"
        test = _TEXT_TEMPLATES[op].format(v=v, k=k)
        return f"({test} if type({v} := {self.get(name)}) is str else {slow})"

    def guarded(self, node: n.Node) -> tuple[str, str] | None:
        """(attempt, fallback) for a predicate whose attempt is exact unless it raises KeyError
        or TypeError: ordered comparisons with a number, IN over non-numeric strings."""
        if isinstance(node, n.Compare) and node.op in ("<", "<=", ">", ">="):
            for op, left, right in (
                (node.op, node.left, node.right),
                (_FLIPPED[node.op], node.right, node.left),
            ):
                name = _simple_field(left)
                if name is not None and _literal_class(right) == "num":
                    assert isinstance(right, n.Literal)
                    self.uses_doc = True
                    k = self.literal(right.value)
                    # bool, int and float compare exactly in Python; str, None, list, dict raise.
                    return f"d[{name!r}] {op} {k}", f"_cmp({op!r}, _n(d.get({name!r})), {k})"
        if isinstance(node, n.In):
            return self.guarded_in(node)
        return None

    def guarded_in(self, node: n.In) -> tuple[str, str] | None:
        name = _simple_field(node.subject)
        if name is None or {_literal_class(m) for m in node.members} != {"text"}:
            return None
        listed = tuple(m.value for m in node.members if isinstance(m, n.Literal))
        self.uses_doc = True
        members_set, members_tuple = self.const(frozenset(listed)), self.const(listed)
        # A str is found exactly; a list is unhashable and raises; a simdjson Array is hashable
        # (never found in the set), so it is read as an array here; nothing else can match.
        v = self.temp()
        attempt = (
            f"({v} := d[{name!r}]) in {members_set}"
            f" or (type({v}) is _ARR and _in(_n({v}), {members_tuple}))"
        )
        fallback = f"_in(_n(d.get({name!r})), {members_tuple})"
        if node.negated:
            return f"not ({attempt})", f"not {fallback}"
        return attempt, fallback

    def statements(self, root: n.Node) -> list[str]:
        """`matches` of a top-level AND as early returns (TRUE only if every item is TRUE)."""
        items = root.items if isinstance(root, n.And) else (root,)
        lines: list[str] = []
        for item in items:
            pair = self.guarded(item)
            if pair is not None:
                lines += [
                    "try:",
                    f"    if not ({pair[0]}): return False",
                    "except (KeyError, TypeError):",
                    f"    if not ({pair[1]}): return False",
                ]
            elif _strict(item):
                lines.append(f"if not {self.truth(item)}: return False")
            else:
                lines.append(f"if ({self.truth(item)}) is not True: return False")
        lines.append("return True")
        return lines

    def in_fast(self, subject: n.Node, members: tuple[n.Node, ...]) -> str | None:
        name = _simple_field(subject)
        kinds = {_literal_class(m) for m in members}
        if name is None or len(kinds) != 1 or "" in kinds:
            return None
        listed = tuple(m.value for m in members if isinstance(m, n.Literal))
        v, t = self.temp(), self.temp()
        members_set, members_tuple = self.const(frozenset(listed)), self.const(listed)
        slow = f"_in(_n({v}), {members_tuple})"
        if kinds == {"num"}:
            guard = f"({t} := type({v} := {self.get(name)})) is int or {t} is float"
        else:
            guard = f"type({v} := {self.get(name)}) is str"
        return f"({v} in {members_set} if {guard} else {slow})"


def _strict(node: n.Node) -> bool:
    """True when the node's truth value is never NULL (predicates, and AND/OR/NOT of them)."""
    if isinstance(node, n.PREDICATES):
        return True
    if isinstance(node, n.And | n.Or):
        return all(_strict(item) for item in node.items)
    if isinstance(node, n.Not):
        return _strict(node.item)
    return isinstance(node, n.Literal) and type(node.value) is bool


def build(text: str, root: n.Node, mode: str) -> Callable[..., object]:
    """One function `(msg, ctx=None)`; mode 'matches' -> bool, 'value' -> value, 'key' -> int."""
    gen = _Generator()
    statements: list[str] = []
    body = ""
    if mode == "matches":
        statements = gen.statements(root)
    elif mode == "key":
        body = f"_pkey({gen.value(root)})"
    elif mode == "rank":
        body = f"_prank({gen.value(root)})"
    else:
        body = gen.value(root)
    lines = ["def _expression(msg, ctx=None):"]
    if gen.uses_ctx:
        lines.append("    if ctx is None: ctx = _CTX")
    if gen.uses_doc:
        # The parsed document is cached on the message; parse it here only on first use.
        lines += ["    d = msg._doc", "    if d is None: d = msg.document()"]
    if statements:
        lines += ["    " + line for line in statements]
    else:
        lines.append(f"    return {body}")
    source = "\n".join(lines)
    try:
        code = compile(source, f"<expression {text[:40]!r}>", "exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        raise FilterSyntaxError(text, 1, "expression too complex to compile") from None
    exec(code, gen.namespace)
    function = gen.namespace["_expression"]
    assert callable(function)
    function.__doc__ = source
    return function
