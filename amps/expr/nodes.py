"""The syntax tree: frozen nodes, each with the 1-based column where it starts."""

from __future__ import annotations

from dataclasses import dataclass

from amps.expr.lexer import PathStep
from amps.expr.values import Value, scalar_text


@dataclass(frozen=True, slots=True)
class Literal:
    value: Value
    column: int


@dataclass(frozen=True, slots=True)
class Path:
    steps: tuple[PathStep, ...]
    text: str
    column: int


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # "-" or "+"
    operand: Node
    column: int


@dataclass(frozen=True, slots=True)
class Arith:
    op: str  # + - * / %
    left: Node
    right: Node
    column: int


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # = != < <= > >=
    left: Node
    right: Node
    column: int


@dataclass(frozen=True, slots=True)
class In:
    subject: Node
    members: tuple[Node, ...]
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class Between:
    subject: Node
    low: Node
    high: Node
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class Like:
    subject: Node
    pattern: str  # regex source handed to RE2 (already escaped for raw strings)
    shown: str  # the literal as written, for rendering
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class Affix:
    subject: Node
    affixes: tuple[str, ...]
    at_start: bool  # BEGINS WITH when true, ENDS WITH otherwise
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class IsNull:
    subject: Node
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class IsNan:
    subject: Node
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Node, ...]
    column: int


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Node, ...]
    column: int


@dataclass(frozen=True, slots=True)
class Not:
    item: Node
    column: int


@dataclass(frozen=True, slots=True)
class If:
    condition: Node
    then: Node
    otherwise: Node
    column: int


@dataclass(frozen=True, slots=True)
class Call:
    name: str  # upper case
    args: tuple[Node, ...]
    column: int
    pattern: str = ""  # REGEXP_MATCH / REGEXP_REPLACE: the literal pattern source


Node = (
    Literal
    | Path
    | Unary
    | Arith
    | Compare
    | In
    | Between
    | Like
    | Affix
    | IsNull
    | IsNan
    | And
    | Or
    | Not
    | If
    | Call
)

# Predicates always yield TRUE or FALSE, never NULL (Reading A of §5.1).
PREDICATES = (Compare, In, Between, Like, Affix, IsNull, IsNan)


def render_literal(value: Value) -> str:
    if value is None:
        return "NULL"
    if type(value) is str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    assert type(value) is not list
    return scalar_text(value)  # type: ignore[arg-type]


def render(node: Node) -> str:
    """A readable, fully parenthesised form of the tree (printed by `amps expr check`)."""
    match node:
        case Literal(value=value):
            return render_literal(value)
        case Path(text=text):
            return text
        case Unary(op=op, operand=operand):
            return f"({op}{render(operand)})"
        case Arith(op=op, left=left, right=right) | Compare(op=op, left=left, right=right):
            return f"({render(left)} {op} {render(right)})"
        case In(subject=subject, members=members, negated=negated):
            listed = ", ".join(render(m) for m in members)
            return f"({render(subject)} {'NOT IN' if negated else 'IN'} ({listed}))"
        case Between(subject=subject, low=low, high=high, negated=negated):
            word = "NOT BETWEEN" if negated else "BETWEEN"
            return f"({render(subject)} {word} {render(low)} AND {render(high)})"
        case Like(subject=subject, shown=shown, negated=negated):
            return f"({render(subject)} {'NOT LIKE' if negated else 'LIKE'} {shown})"
        case Affix(subject=subject, affixes=affixes, at_start=at_start, negated=negated):
            word = ("NOT " if negated else "") + ("BEGINS WITH" if at_start else "ENDS WITH")
            listed = ", ".join(render_literal(a) for a in affixes)
            return f"({render(subject)} {word} ({listed}))"
        case IsNull(subject=subject, negated=negated):
            return f"({render(subject)} IS {'NOT ' if negated else ''}NULL)"
        case IsNan(subject=subject, negated=negated):
            return f"({render(subject)} IS {'NOT ' if negated else ''}NAN)"
        case And(items=items):
            return "(" + " AND ".join(render(i) for i in items) + ")"
        case Or(items=items):
            return "(" + " OR ".join(render(i) for i in items) + ")"
        case Not(item=item):
            return f"(NOT {render(item)})"
        case If(condition=condition, then=then, otherwise=otherwise):
            return f"IF({render(condition)}, {render(then)}, {render(otherwise)})"
        case Call(name=name, args=args):
            return f"{name}(" + ", ".join(render(a) for a in args) + ")"
    raise AssertionError(f"unknown node {node!r}")


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of a node, in source order."""
    match node:
        case Unary(operand=operand):
            return (operand,)
        case Arith(left=left, right=right) | Compare(left=left, right=right):
            return (left, right)
        case In(subject=subject, members=members):
            return (subject, *members)
        case Between(subject=subject, low=low, high=high):
            return (subject, low, high)
        case Like(subject=s) | Affix(subject=s) | IsNull(subject=s) | IsNan(subject=s):
            return (s,)
        case And(items=items) | Or(items=items):
            return items
        case Not(item=item):
            return (item,)
        case If(condition=condition, then=then, otherwise=otherwise):
            return (condition, then, otherwise)
        case Call(args=args):
            return args
    return ()


def walk(node: Node) -> list[Node]:
    """Every node of the tree, parents first."""
    out = [node]
    for child in children(node):
        out.extend(walk(child))
    return out
