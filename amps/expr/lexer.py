"""Tokens of the expression language (AMPS-EXPRESSIONS.md §2).

The one context-sensitive rule: in operand position ``/`` starts a path, in operator position it
is division; inside a path a ``/`` glued to the previous step continues the path (``/a/2`` is one
path, ``/a /2`` is a division). Columns are 1-based.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from amps.errors import FilterSyntaxError

MAX_EXPRESSION_CHARS = 65536


class Tok(enum.Enum):
    NUMBER = "number"
    STRING = "string"
    PATH = "path"
    WORD = "word"
    OP = "operator"
    LPAREN = "'('"
    RPAREN = "')'"
    COMMA = "','"
    END = "end of expression"


@dataclass(frozen=True, slots=True)
class PathStep:
    """One step: a field name, or a zero-based subscript when `index` is not None."""

    name: str
    index: int | None = None


@dataclass(frozen=True, slots=True)
class Token:
    kind: Tok
    text: str
    column: int
    value: object = None  # number value, decoded string, tuple[PathStep, ...] or upper-case word
    pattern: str = ""  # strings: the undecoded text, handed to the regex engine as is (§2.3)
    raw: bool = False  # strings: r'...' form


_NAME_EXTRA = frozenset("_.-")
_OPERATORS = ("==", "!=", "<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "%")
_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
# Tokens after which a `/` is the division operator rather than the start of a path.
_OPERAND_ENDS = frozenset({Tok.NUMBER, Tok.STRING, Tok.PATH, Tok.RPAREN})
_VALUE_WORDS = frozenset({"NULL", "TRUE", "FALSE", "NAN"})


def _is_name_char(ch: str) -> bool:
    return not ch.isascii() or ch.isalnum() or ch in _NAME_EXTRA


def _is_word_start(ch: str) -> bool:
    return ch.isascii() and (ch.isalpha() or ch == "_")


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.tokens: list[Token] = []

    def fail(self, detail: str, pos: int | None = None) -> FilterSyntaxError:
        return FilterSyntaxError(self.text, (self.pos if pos is None else pos) + 1, detail)

    def run(self) -> list[Token]:
        text = self.text
        while True:
            while self.pos < len(text) and text[self.pos].isspace():
                self.pos += 1
            if self.pos >= len(text):
                self.tokens.append(Token(Tok.END, "", len(text) + 1))
                return self.tokens
            self.tokens.append(self.next_token())

    def operand_position(self) -> bool:
        if not self.tokens:
            return True
        last = self.tokens[-1]
        if last.kind is Tok.WORD:
            return last.value not in _VALUE_WORDS
        return last.kind not in _OPERAND_ENDS

    def next_token(self) -> Token:
        text, start = self.text, self.pos
        ch = text[start]
        if ch == "/" and self.operand_position():
            return self.path()
        if ch == "[" and self.operand_position():
            return self.bracketed_path()
        if ch in "'\"":
            return self.string(raw=False)
        if ch in "rR" and start + 1 < len(text) and text[start + 1] in "'\"":
            self.pos += 1
            return self.string(raw=True)
        if ch.isdigit():
            return self.number()
        if ch == ".":
            raise self.fail("a number needs a digit before '.'")
        if _is_word_start(ch):
            end = start
            while end < len(text) and (
                text[end].isascii() and (text[end].isalnum() or text[end] == "_")
            ):
                end += 1
            self.pos = end
            word = text[start:end]
            return Token(Tok.WORD, word, start + 1, word.upper())
        single = {"(": Tok.LPAREN, ")": Tok.RPAREN, ",": Tok.COMMA}
        if ch in single:
            self.pos += 1
            return Token(single[ch], ch, start + 1)
        for op in _OPERATORS:
            if text.startswith(op, start):
                self.pos += len(op)
                canonical = {"==": "=", "<>": "!="}.get(op, op)
                return Token(Tok.OP, op, start + 1, canonical)
        raise self.fail(f"unexpected character {ch!r}")

    def path(self) -> Token:
        text, start = self.text, self.pos
        steps: list[PathStep] = []
        while self.pos < len(text) and text[self.pos] == "/":
            name_start = self.pos + 1
            end = name_start
            if end < len(text) and text[end] == "@":
                end += 1
            while end < len(text) and _is_name_char(text[end]):
                end += 1
            if end == name_start or text[name_start:end] == "@":
                raise self.fail("expected a field name after '/'", name_start)
            steps.append(PathStep(text[name_start:end]))
            self.pos = end
            self.subscripts(steps)
            # A '/' continues the path only when a name (or '@') is glued to it.
            nxt = self.pos + 1
            if not (nxt < len(text) and (_is_name_char(text[nxt]) or text[nxt] == "@")):
                break
        return Token(Tok.PATH, text[start : self.pos], start + 1, tuple(steps))

    def bracketed_path(self) -> Token:
        text, start = self.text, self.pos
        if not text.startswith("[/", start):
            raise self.fail("expected '/' after '[' (a bracketed field is written [/name])")
        close = text.find("]", start)
        if close < 0:
            raise self.fail("expected ']' to close the bracketed field name")
        name = text[start + 2 : close]
        if not name:
            raise self.fail("expected a field name after '[/'", start + 2)
        self.pos = close + 1
        steps = [PathStep(name)]
        self.subscripts(steps)
        return Token(Tok.PATH, text[start : self.pos], start + 1, tuple(steps))

    def subscripts(self, steps: list[PathStep]) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] == "[":
            close = text.find("]", self.pos)
            inner = text[self.pos + 1 : close] if close > 0 else ""
            if close < 0 or not inner.strip().isdigit() or not inner.strip().isascii():
                raise self.fail("a subscript must be a non-negative integer in brackets, like [0]")
            index = int(inner.strip())
            if index > 2**31:
                raise self.fail("subscript too large")
            steps.append(PathStep("", index))
            self.pos = close + 1

    def number(self) -> Token:
        text, start = self.text, self.pos
        end = start
        while end < len(text) and text[end].isdigit():
            end += 1
        is_float = False
        if end < len(text) and text[end] == ".":
            if not (end + 1 < len(text) and text[end + 1].isdigit()):
                raise self.fail("a number needs a digit after '.'", end)
            end += 1
            while end < len(text) and text[end].isdigit():
                end += 1
            is_float = True
        if end < len(text) and text[end] in "eE":
            exp = end + 1
            if exp < len(text) and text[exp] in "+-":
                exp += 1
            if not (exp < len(text) and text[exp].isdigit()):
                raise self.fail("a number needs digits in its exponent", end)
            end = exp
            while end < len(text) and text[end].isdigit():
                end += 1
            is_float = True
        if end < len(text) and (text[end].isalpha() or text[end] == "_"):
            raise self.fail(f"unexpected character {text[end]!r} after a number", end)
        self.pos = end
        literal = text[start:end]
        if not literal.isascii():
            raise self.fail("a number must use the digits 0-9", start)
        value: int | float = float(literal) if is_float else int(literal)
        if type(value) is int and value > 2**64 - 1:
            value = float(value)  # Q6: beyond unsigned 64-bit, the literal is a double
        return Token(Tok.NUMBER, literal, start + 1, value)

    def string(self, raw: bool) -> Token:
        text = self.text
        quote_pos = self.pos
        start = quote_pos - 1 if raw else quote_pos
        quote = text[quote_pos]
        pos = quote_pos + 1
        decoded: list[str] = []
        while True:
            if pos >= len(text):
                raise self.fail(f"unterminated string: expected {quote}", start)
            ch = text[pos]
            if ch == quote:
                break
            if ch == "\\" and not raw:
                pos = self.escape(pos, decoded)
                continue
            decoded.append(ch)
            pos += 1
        self.pos = pos + 1
        return Token(
            Tok.STRING,
            text[start : self.pos],
            start + 1,
            "".join(decoded),
            pattern=text[quote_pos + 1 : pos],
            raw=raw,
        )

    def escape(self, pos: int, out: list[str]) -> int:
        text = self.text
        if pos + 1 >= len(text):
            raise self.fail("unterminated string: a backslash ends the text", pos)
        ch = text[pos + 1]
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
            return pos + 2
        if ch == "x":
            digits = text[pos + 2 : pos + 4]
            if len(digits) != 2 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.fail("\\x needs two hex digits", pos)
            out.append(chr(int(digits, 16)))
            return pos + 4
        if ch in "01234567":
            end = pos + 1
            while end < len(text) and end < pos + 4 and text[end] in "01234567":
                end += 1
            out.append(chr(int(text[pos + 1 : end], 8) & 0xFF))
            return end
        out.append(ch)
        return pos + 2


def tokenize(text: str) -> list[Token]:
    """Split `text` into tokens ending with END; raises FilterSyntaxError."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise FilterSyntaxError(
            text, 1, f"expression longer than {MAX_EXPRESSION_CHARS} characters"
        )
    return _Lexer(text).run()
