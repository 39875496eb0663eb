"""A documented subset of Druid's expression language, parsed for ``transformSpec`` transforms.

Literals (``12``, ``1.5``, ``'text'``, ``null``), input fields (``name`` or ``"any name"``;
``__time`` is the event time in milliseconds), the operators ``- !`` (unary), ``^``,
``* / %``, ``+ -``, ``< <= > >= == !=``, ``&&``, ``||`` with Druid's precedence, and the
functions in :data:`FUNCTIONS`. Anything else is a :class:`SpecError` naming what is not
supported, so an expression is never read differently from Druid.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from specs import limits
from specs.filters import check_regex
from specs.granularity import Granularity
from specs.spec_errors import SpecError

__all__ = ["CAST_TYPES", "FUNCTIONS", "Call", "Expr", "Field", "Literal", "joda_to_strptime", "parse_expression",
           "referenced_fields"]

FUNCTIONS: dict[str, tuple[int, int | None]] = {
    "concat": (1, None), "lower": (1, 1), "upper": (1, 1), "strlen": (1, 1), "substring": (3, 3),
    "trim": (1, 1), "ltrim": (1, 1), "rtrim": (1, 1), "replace": (3, 3), "nvl": (2, 2), "if": (3, 3),
    "case_searched": (2, None), "case_simple": (3, None), "like": (2, 2), "regexp_extract": (2, 3),
    "isnull": (1, 1), "notnull": (1, 1), "abs": (1, 1), "cast": (2, 2),
    "timestamp_floor": (2, 2), "timestamp_parse": (1, 2), "timestamp_format": (1, 1),
}
"""Supported functions: name -> (fewest, most arguments; None: any number)."""


@dataclass(frozen=True)
class Literal:
    """A constant: a string, an integer (Druid's LONG), a float (DOUBLE) or None (null)."""

    value: str | int | float | None


@dataclass(frozen=True)
class Field:
    """An input field of the record (``__time``: the event time in milliseconds)."""

    name: str


@dataclass(frozen=True)
class Call:
    """An operator (``+``, ``==``, ``neg``, ``!``, ...) or a function applied to arguments."""

    name: str
    args: tuple[Expr, ...]


Expr = Literal | Field | Call

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<number>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)
    | '(?P<string>(?:[^'\\]|\\.)*)'
    | "(?P<quoted>(?:[^"\\]|\\.)*)"
    | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
    | (?P<op>&&|\|\||<=|>=|==|!=|[-+*/%^<>!(),])
    )""", re.VERBOSE)
_BINARY = [("&&", "||"), ("<", "<=", ">", ">=", "==", "!="), ("+", "-"), ("*", "/", "%")]
"""Binary operators from the loosest to the tightest binding; ``^`` (right-associative) binds tighter.
``&&`` and ``||`` bind alike in Druid (not as in SQL), so mixing them without parentheses is refused."""


def parse_expression(text: str) -> Expr:
    """Parse a Druid expression; :class:`SpecError` (path ``""``) if it is invalid or unsupported.

    Nesting (parentheses, calls, unary operators, ``^``) and the depth of the parsed tree (a chain
    ``a + b + ...`` is as deep as it is long) are limited to :data:`specs.limits.MAX_EXPRESSION_DEPTH`:
    the parser and the SQL translation recurse per level.
    """
    parser = _Parser(text)
    expr = parser.parse()
    deepest, todo = 0, [(expr, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(node, Call):
            todo.extend((arg, depth + 1) for arg in node.args)
    if deepest > limits.MAX_EXPRESSION_DEPTH:
        raise parser._error(f"{deepest} operations deep; at most {limits.MAX_EXPRESSION_DEPTH} are allowed (a limit "
                            "of this service): split it into several transforms")
    return expr


def referenced_fields(expr: Expr) -> list[str]:
    """The input fields ``expr`` reads, in order of first use."""
    if isinstance(expr, Field):
        return [expr.name]
    if isinstance(expr, Call):
        return list(dict.fromkeys(name for arg in expr.args for name in referenced_fields(arg)))
    return []


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), text)


class _Parser:
    """Recursive descent over the tokens, one method per precedence level."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        position = 0
        while text[position:].strip():
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise self._error(f"unexpected {text[position:].strip()[:20]!r}")
            kind = next(k for k, v in match.groupdict().items() if v is not None)
            self.tokens.append((kind, match[kind]))
            position = match.end()
        self.at = 0
        self.depth = 0

    def parse(self) -> Expr:
        if not self.tokens:
            raise self._error("empty expression")
        expr = self._binary(0)
        if self.at < len(self.tokens):
            raise self._error(f"unexpected {self.tokens[self.at][1]!r}")
        return expr

    def _error(self, message: str) -> SpecError:
        return SpecError.at("", f"{self.text!r}: {message}")

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self, op: str) -> bool:
        if self._peek() == ("op", op):
            self.at += 1
            return True
        return False

    def _binary(self, level: int) -> Expr:
        if level == len(_BINARY):
            return self._power()
        left = self._binary(level + 1)
        used = set()
        while (token := self._peek()) is not None and token[0] == "op" and token[1] in _BINARY[level]:
            self.at += 1
            used.add(token[1])
            left = Call(token[1], (left, self._binary(level + 1)))
        if used == {"&&", "||"}:
            raise self._error("&& and || mixed without parentheses: add parentheses to say "
                              "which applies first")
        return left

    def _enter(self) -> None:
        """One level deeper (left by ``self.depth -= 1``); refused past the limit, before Python's own."""
        self.depth += 1
        if self.depth > limits.MAX_EXPRESSION_DEPTH:
            raise self._error(f"nested more than {limits.MAX_EXPRESSION_DEPTH} levels deep (a limit of this service)")

    def _power(self) -> Expr:
        base = self._unary()
        if not self._take("^"):
            return base
        self._enter()
        try:
            return Call("^", (base, self._power()))
        finally:
            self.depth -= 1

    def _unary(self) -> Expr:
        self._enter()
        try:
            return self._signed()
        finally:
            self.depth -= 1

    def _signed(self) -> Expr:
        if self._take("-"):
            operand = self._unary()
            if isinstance(operand, Literal) and isinstance(operand.value, int | float):
                return Literal(-operand.value)
            return Call("neg", (operand,))
        if self._take("!"):
            return Call("!", (self._unary(),))
        return self._atom()

    def _atom(self) -> Expr:
        token = self._peek()
        if token is None:
            raise self._error("unexpected end")
        self.at += 1
        kind, text = token
        if kind == "number":
            return Literal(float(text) if any(c in text for c in ".eE") else int(text))
        if kind == "string":
            return Literal(_unescape(text))
        if kind == "quoted":
            return Field(_unescape(text))
        if kind == "name":
            if self._take("("):
                return self._call(text.lower())  # Druid's function names are case-insensitive
            return Literal(None) if text == "null" else Field(text)
        if text == "(":
            inner = self._binary(0)
            if not self._take(")"):
                raise self._error("missing ')'")
            return inner
        raise self._error(f"unexpected {text!r}")

    def _call(self, name: str) -> Expr:
        args: list[Expr] = []
        if not self._take(")"):
            args.append(self._binary(0))
            while self._take(","):
                args.append(self._binary(0))
            if not self._take(")"):
                raise self._error(f"missing ')' after the arguments of {name}")
        if name not in FUNCTIONS:
            raise self._error(f"function {name} is not supported; supported: {', '.join(sorted(FUNCTIONS))}")
        fewest, most = FUNCTIONS[name]
        if len(args) < fewest or (most is not None and len(args) > most):
            wanted = str(fewest) if fewest == most else f"{fewest} to {most}" if most else f"at least {fewest}"
            raise self._error(f"{name} takes {wanted} arguments, got {len(args)}")
        for index in _CONSTANT.get(name, ()):
            if index < len(args):
                _check_constant(name, index, args[index], self._error)
        return Call(name, tuple(args))


_CONSTANT: dict[str, tuple[int, ...]] = {"timestamp_floor": (1,), "timestamp_parse": (1,), "cast": (1,),
                                         "like": (1,), "regexp_extract": (1, 2), "substring": (1, 2)}
"""Arguments that must be literals (a period, a pattern, a type, a position)."""
CAST_TYPES = ("LONG", "DOUBLE", "STRING")
_JODA = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S", "SSS": "%g"}


def joda_to_strptime(pattern: str) -> str:
    """DuckDB's ``strptime`` format of a Joda pattern made of yyyy MM dd HH mm ss SSS and punctuation."""
    out, position = [], 0
    while position < len(pattern):
        token = next((t for t in _JODA if pattern.startswith(t, position)), None)
        if token is not None:
            out.append(_JODA[token])
            position += len(token)
        elif pattern[position] == "'":
            end = pattern.find("'", position + 1)
            if end < 0:
                raise ValueError(f"unclosed quote in {pattern!r}")
            out.append(pattern[position + 1:end].replace("%", "%%") or "'")
            position = end + 1
        elif pattern[position].isalpha():
            raise ValueError(f"pattern letter {pattern[position]!r} in {pattern!r} is not supported "
                             f"(supported: {' '.join(_JODA)} and quoted text)")
        else:
            out.append(pattern[position].replace("%", "%%"))
            position += 1
    return "".join(out)


def _check_constant(name: str, index: int, arg: Expr, error: Callable[[str], SpecError]) -> None:
    """Refuse an argument that must be a literal of a kind when it is not."""
    value = arg.value if isinstance(arg, Literal) else None
    if name == "substring" or (name, index) == ("regexp_extract", 2):
        if not isinstance(value, int):
            raise error(f"argument {index + 1} of {name} must be an integer literal")
        return
    if not isinstance(value, str):
        raise error(f"argument {index + 1} of {name} must be a string literal")
    try:
        if name == "timestamp_floor":
            Granularity.parse({"type": "period", "period": value})
        elif name == "timestamp_parse":
            joda_to_strptime(value)
        elif name == "regexp_extract":
            check_regex(value, "")
        elif name == "cast" and value.upper() not in CAST_TYPES:
            raise ValueError(f"cast to {value!r} is not supported (supported: {', '.join(CAST_TYPES)})")
    except (SpecError, ValueError) as exc:
        raise error(f"{name}: {exc}") from None
