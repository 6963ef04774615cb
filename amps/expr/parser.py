"""Recursive-descent parser for the grammar of AMPS-EXPRESSIONS.md §4.3.

Precedence (high to low): primary, unary +/-, * / % MOD, + -, one non-chaining predicate level,
NOT, AND, OR. Nesting is bounded by `MAX_DEPTH` so no input can exhaust the stack.
"""

from __future__ import annotations

from amps.errors import FilterSyntaxError
from amps.expr import nodes as n
from amps.expr.lexer import Tok, Token, tokenize
from amps.expr.regex import compile_pattern

MAX_DEPTH = 40
MAX_PATTERN_CHARS = 1024

_CMP_OPS = frozenset({"=", "!=", "<", "<=", ">", ">="})
# Predicate words that may follow an operand (after an optional NOT).
_PREDICATE_WORDS = frozenset({"IN", "BETWEEN", "LIKE", "BEGINS", "ENDS"})
_RESERVED = frozenset(
    {"AND", "OR", "NOT", "IN", "BETWEEN", "LIKE", "IS", "BEGINS", "ENDS", "WITH", "MOD", "NAN"}
)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.depth = 0

    # -- token helpers -------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.index]

    def at(self, kind: Tok) -> bool:
        """Whether the current token is of `kind` (a method: mypy must not narrow it)."""
        return self.tokens[self.index].kind is kind

    def advance(self) -> Token:
        token = self.tokens[self.index]
        if token.kind is not Tok.END:
            self.index += 1
        return token

    def is_word(self, *words: str) -> bool:
        return self.at(Tok.WORD) and self.tok.value in words

    def peek_word(self, offset: int, *words: str) -> bool:
        position = min(self.index + offset, len(self.tokens) - 1)
        token = self.tokens[position]
        return token.kind is Tok.WORD and token.value in words

    def fail(self, detail: str, token: Token | None = None) -> FilterSyntaxError:
        token = token or self.tok
        return FilterSyntaxError(self.text, token.column, detail)

    def describe(self, token: Token) -> str:
        return "end of expression" if token.kind is Tok.END else repr(token.text)

    def expect(self, kind: Tok, what: str) -> Token:
        if self.tok.kind is not kind:
            raise self.fail(f"expected {what} but found {self.describe(self.tok)}")
        return self.advance()

    def expect_word(self, word: str) -> Token:
        if not self.is_word(word):
            raise self.fail(f"expected {word} but found {self.describe(self.tok)}")
        return self.advance()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"expression nested more than {MAX_DEPTH} levels deep")

    # -- grammar ---------------------------------------------------------------------------------

    def parse(self) -> n.Node:
        node = self.expr()
        if not self.at(Tok.END):
            if self.at(Tok.RPAREN):
                raise self.fail("unbalanced ')'")
            raise self.fail(f"expected an operator or the end but found {self.describe(self.tok)}")
        return node

    def expr(self) -> n.Node:
        self.enter()
        column = self.tok.column
        items = [self.and_expr()]
        while self.is_word("OR"):
            self.advance()
            items.append(self.and_expr())
        self.depth -= 1
        return items[0] if len(items) == 1 else n.Or(tuple(items), column)

    def and_expr(self) -> n.Node:
        column = self.tok.column
        items = [self.not_expr()]
        while self.is_word("AND"):
            self.advance()
            items.append(self.not_expr())
        return items[0] if len(items) == 1 else n.And(tuple(items), column)

    def not_expr(self) -> n.Node:
        if self.is_word("NOT"):
            token = self.advance()
            self.enter()
            item = self.not_expr()
            self.depth -= 1
            return n.Not(item, token.column)
        return self.predicate()

    def predicate(self) -> n.Node:
        left = self.additive()
        column = left.column
        token = self.tok
        if token.kind is Tok.OP and token.value in _CMP_OPS:
            self.advance()
            node: n.Node = n.Compare(str(token.value), left, self.additive(), column)
        elif self.is_word("IS"):
            node = self.is_tail(left)
        elif self.is_word(*_PREDICATE_WORDS) or (
            self.is_word("NOT") and self.peek_word(1, *_PREDICATE_WORDS)
        ):
            negated = self.is_word("NOT")
            if negated:
                self.advance()
            node = self.word_tail(left, negated)
        elif self.is_word("NOT") and self.peek_word(1, "NULL"):
            raise self.fail("write IS NOT NULL (the shorthand 'NOT NULL' is not accepted)")
        else:
            return left
        nxt = self.tok
        if (nxt.kind is Tok.OP and nxt.value in _CMP_OPS) or self.is_word("IS", *_PREDICATE_WORDS):
            raise self.fail("comparisons do not chain; combine them with AND", nxt)
        return node

    def is_tail(self, left: n.Node) -> n.Node:
        self.advance()
        negated = self.is_word("NOT")
        if negated:
            self.advance()
        if self.is_word("NULL"):
            self.advance()
            return n.IsNull(left, negated, left.column)
        if self.is_word("NAN"):
            self.advance()
            return n.IsNan(left, negated, left.column)
        raise self.fail(f"expected NULL or NAN after IS but found {self.describe(self.tok)}")

    def word_tail(self, left: n.Node, negated: bool) -> n.Node:
        word = self.advance().value
        if word == "IN":
            self.expect(Tok.LPAREN, "'(' after IN")
            members = self.expr_list()
            return n.In(left, tuple(members), negated, left.column)
        if word == "BETWEEN":
            low = self.additive()
            self.expect_word("AND")
            high = self.additive()
            return n.Between(left, low, high, negated, left.column)
        if word == "LIKE":
            pattern_token = self.tok
            if pattern_token.kind is not Tok.STRING:
                raise self.fail("the pattern of LIKE must be a string literal")
            self.advance()
            return n.Like(
                left,
                pattern_source(self.text, pattern_token),
                pattern_token.text,
                negated,
                left.column,
            )
        self.expect_word("WITH")
        affixes = self.affix_list()
        return n.Affix(left, affixes, word == "BEGINS", negated, left.column)

    def expr_list(self) -> list[n.Node]:
        if self.at(Tok.RPAREN):
            raise self.fail("expected at least one value in the list")
        items = [self.expr()]
        while self.at(Tok.COMMA):
            self.advance()
            items.append(self.expr())
        self.expect(Tok.RPAREN, "',' or ')'")
        return items

    def affix_list(self) -> tuple[str, ...]:
        parenthesised = self.at(Tok.LPAREN)
        if parenthesised:
            self.advance()
        items: list[str] = []
        while True:
            if not self.at(Tok.STRING):
                raise self.fail("BEGINS WITH and ENDS WITH take string literals")
            items.append(str(self.advance().value))
            if not parenthesised or not self.at(Tok.COMMA):
                break
            self.advance()
        if parenthesised:
            self.expect(Tok.RPAREN, "',' or ')'")
        return tuple(items)

    def additive(self) -> n.Node:
        base = self.depth
        left = self.term()
        while self.at(Tok.OP) and self.tok.value in ("+", "-"):
            op = str(self.advance().value)
            self.enter()  # a left-leaning chain deepens the tree by one per operator
            left = n.Arith(op, left, self.term(), left.column)
        self.depth = base
        return left

    def term(self) -> n.Node:
        base = self.depth
        left = self.unary()
        while (self.at(Tok.OP) and self.tok.value in ("*", "/", "%")) or self.is_word("MOD"):
            op = "%" if self.is_word("MOD") else str(self.tok.value)
            self.advance()
            self.enter()
            left = n.Arith(op, left, self.unary(), left.column)
        self.depth = base
        return left

    def unary(self) -> n.Node:
        token = self.tok
        if token.kind is Tok.OP and token.value in ("-", "+"):
            self.advance()
            self.enter()
            operand = self.unary()
            self.depth -= 1
            if isinstance(operand, n.Literal) and type(operand.value) in (int, float):
                # Fold signed numeric literals so '-9223372036854775808' stays an integer.
                number = operand.value
                assert isinstance(number, int | float)
                return n.Literal(-number if token.value == "-" else number, token.column)
            return n.Unary(str(token.value), operand, token.column)
        return self.primary()

    def primary(self) -> n.Node:
        token = self.tok
        if token.kind is Tok.NUMBER or token.kind is Tok.STRING:
            self.advance()
            value = token.value
            return n.Literal(value if value != "" else None, token.column)  # type: ignore[arg-type]
        if token.kind is Tok.PATH:
            self.advance()
            return n.Path(token.value, token.text, token.column)  # type: ignore[arg-type]
        if token.kind is Tok.LPAREN:
            self.advance()
            inner = self.expr()
            self.expect(Tok.RPAREN, "')'")
            return inner
        if token.kind is Tok.WORD:
            return self.word_primary(token)
        if token.kind is Tok.END:
            raise self.fail("expected a value but the expression ended")
        raise self.fail(f"expected a value but found {self.describe(token)}")

    def word_primary(self, token: Token) -> n.Node:
        word = str(token.value)
        constants = {"NULL": None, "TRUE": True, "FALSE": False}
        if word in constants:
            self.advance()
            return n.Literal(constants[word], token.column)
        if word in _RESERVED:
            raise self.fail(f"expected a value but found the keyword {word}")
        self.advance()
        if not self.at(Tok.LPAREN):
            raise self.fail(f"unknown word {token.text!r}: fields are written /name", token)
        self.advance()
        self.enter()
        args: list[n.Node] = []
        pattern = ""
        if not self.at(Tok.RPAREN):
            while True:
                if word in ("REGEXP_MATCH", "REGEXP_REPLACE") and len(args) == 1:
                    if not self.at(Tok.STRING):
                        raise self.fail(f"the pattern of {word} must be a string literal")
                    pattern = pattern_source(self.text, self.tok)
                args.append(self.expr())
                if not self.at(Tok.COMMA):
                    break
                self.advance()
        self.expect(Tok.RPAREN, "',' or ')'")
        self.depth -= 1
        if word == "IF":
            if len(args) != 3:
                raise self.fail(f"IF takes 3 arguments, not {len(args)}", token)
            return n.If(args[0], args[1], args[2], token.column)
        return n.Call(word, tuple(args), token.column, pattern)


def pattern_source(text: str, token: Token) -> str:
    """The regex source of a pattern literal: undecoded text; a raw string matches literally."""
    if len(token.pattern) > MAX_PATTERN_CHARS:
        raise FilterSyntaxError(
            text, token.column, f"pattern longer than {MAX_PATTERN_CHARS} characters"
        )
    if token.raw:
        return "".join(
            "\\" + ch if ch.isascii() and not ch.isalnum() else ch for ch in token.pattern
        )
    # The delimiter may be escaped inside the literal; RE2 wants the bare quote.
    quote = token.text[-1]
    source = token.pattern.replace("\\" + quote, quote)
    try:
        compile_pattern(source)
    except ValueError as exc:
        raise FilterSyntaxError(text, token.column, str(exc)) from None
    return source


def parse(text: str) -> n.Node:
    """Parse `text` into a tree; raises FilterSyntaxError with a 1-based column."""
    return _Parser(text).parse()
