"""Spark SQL DDL: column lists like ``id BIGINT NOT NULL, name STRING`` parsed into arrow
schemas and printed back; owns the Spark type names and the arrow types they map to.
"""

from __future__ import annotations

import re
from typing import NamedTuple, NoReturn

import pyarrow as pa

from ..errors import InvalidArgumentError, InvalidTypeError
from .types import COMMENT, MAX_DEPTH, NAME_BY_TYPE, SUPPORTED, TYPE_BY_NAME, normalize_field

__all__ = ["parse_ddl", "to_ddl"]

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "0": "\0", "Z": "\x1a"}
_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\n]+)|(?P<word>[A-Za-z0-9_]+)|(?P<quoted>`(?:[^`]|``)*`)"
    r"|(?P<string>'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\")|(?P<punct>[<>(),:])",
    re.DOTALL,
)


# --- DDL parsing -----------------------------------------------------------------------


class _Token(NamedTuple):
    kind: str  # word, number, quoted, string, eof, or the punctuation character itself
    text: str
    pos: int


def _syntax_error(text: str, pos: int, message: str) -> InvalidArgumentError:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    col = pos - start
    cut = max(0, col - 40)
    snippet = text[start : len(text) if end < 0 else end][cut : col + 40]
    caret = " " * (col - cut) + "^"
    where = f"invalid schema at character {pos + 1}"
    return InvalidArgumentError(f"{where}: {message}\n  {snippet}\n  {caret}")


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            problem = {"`": "unterminated `name` (write a backtick inside a name as ``)",
                       "'": "unterminated string", '"': "unterminated string"}  # fmt: skip
            raise _syntax_error(text, pos, problem.get(text[pos], f"unexpected {text[pos]!r}"))
        kind, value = match.lastgroup or "", match.group()
        if kind != "ws":
            kind = {"punct": value, "word": "number" if value.isdigit() else kind}.get(kind, kind)
            tokens.append(_Token(kind, value, pos))
        pos = match.end()
    return [*tokens, _Token("eof", "", len(text))]


class _DdlParser:
    """Recursive descent over ``column (',' column)*``, building arrow fields directly."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def fail(self, message: str, token: _Token | None = None) -> NoReturn:
        raise _syntax_error(self.text, (token or self.peek()).pos, message)

    def expected(self, what: str, token: _Token | None = None) -> NoReturn:
        token = token or self.peek()
        found = "the end of the schema" if token.kind == "eof" else repr(token.text)
        self.fail(f"expected {what}, found {found}", token)

    def accept(self, kind: str) -> bool:
        if self.peek().kind == kind:
            self.advance()
            return True
        return False

    def expect(self, kind: str, what: str) -> _Token:
        if self.peek().kind != kind:
            self.expected(what)
        return self.advance()

    def keyword(self, word: str) -> bool:
        token = self.peek()
        return token.kind == "word" and token.text.upper() == word and bool(self.advance())

    def fields(self, depth: int, end: str, what: str) -> list[pa.Field]:
        fields = [self.field(depth)]
        while self.accept(","):
            fields.append(self.field(depth))
        self.expect(end, what)
        return fields

    def field(self, depth: int) -> pa.Field:
        token = self.advance()
        if token.kind not in ("word", "quoted"):
            self.expected("a column name", token)
        name = token.text[1:-1].replace("``", "`") if token.kind == "quoted" else token.text
        self.accept(":")
        data_type = self.data_type(depth)
        nullable, comment = True, None
        while True:
            token = self.peek()
            if self.keyword("NOT"):
                if not self.keyword("NULL"):
                    self.expected("NULL after NOT")
                if not nullable:
                    self.fail("NOT NULL is given twice", token)
                nullable = False
            elif self.keyword("COMMENT"):
                if comment is not None:
                    self.fail("COMMENT is given twice", token)
                comment = self.string_literal()
            else:
                break
        metadata = None if comment is None else {COMMENT: comment.encode("utf-8")}
        return pa.field(name, data_type, nullable, metadata)

    def string_literal(self) -> str:
        token = self.expect("string", "a quoted string after COMMENT")

        def unescape(match: re.Match[str]) -> str:
            code = match.group(1)
            if code is None:  # a doubled quote
                return quote
            if len(code) == 1:
                return _ESCAPES.get(code, code)
            if 0xD800 <= int(code[1:], 16) <= 0xDFFF:
                self.fail(f"\\{code} is not a character", token)
            return chr(int(code[1:], 16))

        quote = token.text[0]
        escape = r"\\(u[0-9a-fA-F]{4}|.)|" + quote * 2
        return re.sub(escape, unescape, token.text[1:-1], flags=re.DOTALL)

    def number(self, what: str) -> int:
        return int(self.expect("number", what).text)

    def data_type(self, depth: int) -> pa.DataType:
        token = self.peek()
        if depth >= MAX_DEPTH:
            self.fail(f"types may nest at most {MAX_DEPTH} levels deep")
        if token.kind != "word":
            self.expected("a data type")
        self.advance()
        name = token.text.upper()
        if name in ("ARRAY", "MAP", "STRUCT"):
            self.expect("<", f"'<' after {name}")
        if name == "ARRAY":
            item = self.data_type(depth + 1)
            self.expect(">", "'>' to close ARRAY<")
            return pa.list_(item)
        if name == "MAP":
            key = self.data_type(depth + 1)
            self.expect(",", "',' between the MAP key and value types")
            value = self.data_type(depth + 1)
            self.expect(">", "'>' to close MAP<")
            return pa.map_(key, value)
        if name == "STRUCT":
            if self.peek().kind == ">":
                self.fail("STRUCT needs at least one field")
            return pa.struct(self.fields(depth + 1, ">", "',' or '>' to close STRUCT<"))
        if name in ("DECIMAL", "DEC", "NUMERIC"):
            precision, scale = 10, 0
            if self.accept("("):
                precision = self.number("the DECIMAL precision")
                scale = self.number("the DECIMAL scale") if self.accept(",") else 0
                self.expect(")", "')' to close DECIMAL(")
            if not 1 <= precision <= 38 or scale > precision:
                rule = "needs 1 <= precision <= 38 and scale <= precision"
                self.fail(f"DECIMAL({precision},{scale}) {rule}", token)
            return pa.decimal128(precision, scale)
        if name in ("VARCHAR", "CHAR"):
            self.expect("(", f"'(' and a length after {name}")
            if self.number(f"the {name} length") < 1:
                self.fail(f"{name} length must be at least 1", token)
            self.expect(")", f"')' to close {name}(")
            return pa.string()
        if name not in TYPE_BY_NAME:
            self.fail(f"unsupported data type {token.text!r}; supported: {SUPPORTED}", token)
        if self.peek().kind == "(":
            self.fail(f"{name} takes no parameters")
        return TYPE_BY_NAME[name]


def parse_ddl(text: str) -> pa.Schema:
    """The arrow schema a Spark DDL column list describes: syntax and type mapping only.

    Column names are not checked; ``parse_schema`` validates and normalizes the result.
    """
    if not isinstance(text, str):
        raise InvalidTypeError(f"schema text must be a str, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"schema text is not valid Unicode: {exc}") from None
    parser = _DdlParser(text)
    if parser.peek().kind == "eof":
        parser.fail("a schema needs at least one column, like 'id BIGINT NOT NULL'")
    return pa.schema(parser.fields(0, "eof", "',' or the end of the schema"))


# --- DDL printing ------------------------------------------------------------------------


def _field_ddl(field: pa.Field, separator: str) -> str:
    name = field.name
    if not _PLAIN_NAME.fullmatch(name):
        name = "`" + name.replace("`", "``") + "`"
    text = name + separator + _type_ddl(field.type) + ("" if field.nullable else " NOT NULL")
    comment = (field.metadata or {}).get(COMMENT)
    if comment is not None:
        escaped = comment.decode("utf-8", errors="replace").replace("\\", "\\\\")
        escaped = escaped.replace("'", "\\'")
        escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        text += f" COMMENT '{escaped}'"
    return text


def _type_ddl(data_type: pa.DataType) -> str:
    if pa.types.is_decimal(data_type):
        return f"DECIMAL({data_type.precision},{data_type.scale})"
    if pa.types.is_list(data_type):
        return f"ARRAY<{_type_ddl(data_type.value_type)}>"
    if pa.types.is_map(data_type):
        return f"MAP<{_type_ddl(data_type.key_type)}, {_type_ddl(data_type.item_type)}>"
    if pa.types.is_struct(data_type):
        return "STRUCT<" + ", ".join(_field_ddl(f, ": ") for f in data_type) + ">"
    return NAME_BY_TYPE[data_type]


def to_ddl(schema: pa.Schema) -> str:
    """The Spark DDL column list for ``schema``, its types normalized as by ``parse_schema``.

    Zoned timestamps print as TIMESTAMP_LTZ, which means the same whatever
    ``spark.sql.timestampType`` is. Reserved column names are allowed here.
    """
    if not isinstance(schema, pa.Schema):
        raise InvalidTypeError(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    if not len(schema):
        raise InvalidArgumentError("a schema needs at least one column")
    return ", ".join(_field_ddl(normalize_field(f, f.name), " ") for f in schema)
