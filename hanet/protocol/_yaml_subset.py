"""The subset of YAML that RocketMQ's ``plain_acl.yml`` is written in, read without a YAML
library.

Supported: block mappings (``key: value``), block sequences (``- item``, also at the indentation
of their key, as SnakeYAML writes them), sequences of mappings (``- key: value`` with the
mapping's other keys aligned under the first), plain, ``'single'`` and ``"double"`` quoted
scalars, the empty flow collections ``[]`` / ``{}`` and flow sequences of scalars
(``[a, b]``), ``#`` comments, a leading ``---``. Scalars are kept as strings (``12345678``,
``false``: the reader of the document converts); an empty value, ``~`` and ``null`` are None.

Anything else (tabs in indentation, anchors and aliases, tags, block scalars ``|``/``>``,
multi-line scalars, complex keys, duplicate keys, several documents) is a
:class:`YamlSubsetError` naming the line: better refused than read differently from
RocketMQ. A plain scalar that starts with ``*`` is an alias in YAML: quote it (``"*"``).
"""

from __future__ import annotations

from typing import NoReturn, Union

import attrs

from hanet.errors import HanetError

__all__ = ["YamlSubsetError", "YamlValue", "parse_yaml"]

YamlValue = Union[str, None, list["YamlValue"], dict[str, "YamlValue"]]  # noqa: UP007
"""A parsed node: a scalar (str, or None for an empty value), a sequence or a mapping."""

_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_INDICATORS = {
    "&": "an anchor",
    "*": "an alias (quote a value that starts with '*': \"*\")",
    "!": "a tag",
    "|": "a block scalar",
    ">": "a block scalar",
    "%": "a directive",
    "@": "a reserved indicator",
    "`": "a reserved indicator",
}


class YamlSubsetError(HanetError, ValueError):
    """Text outside the YAML subset read here (or not YAML at all); names the line."""


@attrs.define
class _Line:
    number: int
    indent: int
    text: str  # the content after the indentation, comment lines and blank lines removed


def parse_yaml(text: str, source: str = "<yaml>") -> YamlValue:
    """The document in ``text`` (None when it holds nothing).

    Raises:
        YamlSubsetError: ``source:line: reason`` for anything outside the subset.
    """
    lines = _lines(text, source)
    if not lines:
        return None
    parser = _Parser(lines, source)
    try:
        value = parser.block(0, lines[0].indent)
    except RecursionError:  # "- - - ... x": one level of Python recursion per level
        raise YamlSubsetError(f"{source}: nested too deep") from None
    if parser.pos < len(lines):
        parser.fail(lines[parser.pos], "unexpected indentation")
    return value


def _lines(text: str, source: str) -> list[_Line]:
    out: list[_Line] = []
    started = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        content = line.lstrip(" ")
        indent = len(line) - len(content)
        if content.startswith("\t") or (content and "\t" in line[:indent]):
            raise YamlSubsetError(f"{source}:{number}: a tab in the indentation (use spaces)")
        if not content or content.startswith("#"):
            continue
        if indent == 0 and content.startswith(("---", "...")) and content[3:4] in ("", " "):
            rest = content[3:].strip()
            if content.startswith("...") or started or (rest and not rest.startswith("#")):
                raise YamlSubsetError(f"{source}:{number}: one document only, no content after ---")
            started = True
            continue
        started = True
        out.append(_Line(number, indent, content))
    return out


class _Parser:
    def __init__(self, lines: list[_Line], source: str) -> None:
        self.lines = lines
        self.source = source
        self.pos = 0

    def fail(self, line: _Line, reason: str) -> NoReturn:
        raise YamlSubsetError(f"{self.source}:{line.number}: {reason}")

    def block(self, pos: int, indent: int) -> YamlValue:
        self.pos = pos
        if _is_item(self.lines[pos].text):
            return self.sequence(indent)
        return self.mapping(indent)

    def sequence(self, indent: int) -> list[YamlValue]:
        items: list[YamlValue] = []
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.indent < indent:
                break
            if line.indent > indent:
                self.fail(line, "unexpected indentation")
            if not _is_item(line.text):
                break
            rest = line.text[1:]
            stripped = rest.lstrip(" ")
            if not stripped or stripped.startswith("#"):
                self.pos += 1
                items.append(self.nested(line, indent))
                continue
            inner = indent + 1 + len(rest) - len(stripped)
            if _is_item(stripped) or _key_end(stripped) is not None:
                # "- key: value" / "- - x": a block whose first line starts after the dash
                self.lines[self.pos] = _Line(line.number, inner, stripped)
                items.append(self.block(self.pos, inner))
            else:
                items.append(self.scalar(line, stripped))
                self.pos += 1
        return items

    def mapping(self, indent: int) -> dict[str, YamlValue]:
        out: dict[str, YamlValue] = {}
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.indent < indent:
                break
            if line.indent > indent:
                self.fail(line, "unexpected indentation")
            if _is_item(line.text):
                self.fail(line, "a sequence item where a 'key: value' was expected")
            key, rest = self.key(line)
            if key in out:
                self.fail(line, f"duplicate key {key!r}")
            stripped = rest.strip()
            if stripped and not stripped.startswith("#"):
                out[key] = self.scalar(line, stripped)
                self.pos += 1
                continue
            self.pos += 1
            following = self.lines[self.pos] if self.pos < len(self.lines) else None
            if following is not None and following.indent == indent and _is_item(following.text):
                out[key] = self.sequence(indent)  # a sequence at its key's indentation
            else:
                out[key] = self.nested(line, indent)
        return out

    def nested(self, line: _Line, indent: int) -> YamlValue:
        """The block under ``line`` (more indented), or None when there is none."""
        if self.pos < len(self.lines) and self.lines[self.pos].indent > indent:
            return self.block(self.pos, self.lines[self.pos].indent)
        return None

    def key(self, line: _Line) -> tuple[str, str]:
        text = line.text
        if text[0] in "'\"":
            key, end = self.quoted(line, text)
            rest = text[end:]
            if not rest.startswith(":") or rest[1:2] not in ("", " "):
                self.fail(line, "expected ':' after a quoted key")
            return key, rest[1:]
        if text.startswith("? "):
            self.fail(line, "complex keys ('? ') are not supported")
        if text[0] in "[{":
            self.fail(line, "flow collections as keys are not supported")
        colon = _key_end(text)
        if colon is None:
            self.fail(line, f"expected 'key: value', got {text!r}")
        key = text[:colon].rstrip()
        if key[0] in _INDICATORS:
            self.fail(line, f"{key[0]!r} starts {_INDICATORS[key[0]]}, not supported")
        return key, text[colon + 1 :]

    def scalar(self, line: _Line, text: str) -> YamlValue:
        """A value written on one line: a scalar or a flow collection of scalars."""
        if text[0] in "'\"":
            value, end = self.quoted(line, text)
            rest = text[end:].strip()
            if rest and not rest.startswith("#"):
                self.fail(line, f"unexpected text after a quoted scalar: {rest!r}")
            self.no_continuation(line)
            return value
        if text[0] in "[{":
            self.no_continuation(line)
            return self.flow(line, text)
        if text[0] in _INDICATORS:
            self.fail(line, f"{text[0]!r} starts {_INDICATORS[text[0]]}, not supported")
        if text.startswith(("- ", "? ")) or text == "-":
            self.fail(line, f"unexpected {text[0]!r} in a value")
        value = _strip_comment(text)
        if _key_end(value) is not None:
            self.fail(line, f"a ': ' inside a plain value (quote it): {value!r}")
        self.no_continuation(line)
        return None if value in _NULLS else value

    def no_continuation(self, line: _Line) -> None:
        following = self.lines[self.pos + 1] if self.pos + 1 < len(self.lines) else None
        if (
            following is not None
            and following.indent > line.indent
            and not _is_item(following.text)
            and _key_end(following.text) is None
        ):
            self.fail(following, "multi-line scalars are not supported")

    def flow(self, line: _Line, text: str) -> YamlValue:
        body = _strip_comment(text)
        if body in ("[]", "{}"):
            return [] if body == "[]" else {}
        if not (body.startswith("[") and body.endswith("]")):
            self.fail(line, f"only [] / {{}} and flow sequences of scalars, got {body!r}")
        items: list[YamlValue] = []
        for part in body[1:-1].split(","):
            item = part.strip()
            if not item:
                self.fail(line, f"an empty item in {body!r}")
            if item[0] in "'\"":
                value, end = self.quoted(line, item)
                if end != len(item):
                    self.fail(line, f"unexpected text after a quoted scalar in {body!r}")
                items.append(value)
            elif item[0] in "[]{}" or item[0] in _INDICATORS or _key_end(item) is not None:
                self.fail(line, f"only plain or quoted scalars in a flow sequence, got {item!r}")
            else:
                items.append(None if item in _NULLS else item)
        return items

    def quoted(self, line: _Line, text: str) -> tuple[str, int]:
        """A quoted scalar at the start of ``text``: its value and where it ends."""
        quote = text[0]
        out: list[str] = []
        i = 1
        while i < len(text):
            ch = text[i]
            if quote == "'":
                if ch == "'":
                    if text[i + 1 : i + 2] == "'":
                        out.append("'")
                        i += 2
                        continue
                    return "".join(out), i + 1
            elif ch == '"':
                return "".join(out), i + 1
            elif ch == "\\":
                escaped, i = self.escape(line, text, i)
                out.append(escaped)
                continue
            out.append(ch)
            i += 1
        self.fail(line, "a quoted scalar not closed on its line")

    def escape(self, line: _Line, text: str, i: int) -> tuple[str, int]:
        code = text[i + 1 : i + 2]
        simple = {"\\": "\\", '"': '"', "/": "/", "n": "\n", "t": "\t", "r": "\r", "0": "\0"}
        if code in simple:
            return simple[code], i + 2
        if code in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[code]
            digits = text[i + 2 : i + 2 + width]
            try:
                if len(digits) != width:
                    raise ValueError(digits)
                return chr(int(digits, 16)), i + 2 + width
            except ValueError:
                pass
        self.fail(line, f"unsupported escape \\{code} in a double-quoted scalar")


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _key_end(text: str) -> int | None:
    """Where the ``:`` ending a plain key is (a ``:`` followed by a space or the end)."""
    start = 0
    while True:
        i = text.find(":", start)
        if i < 0:
            return None
        hash_at = text.find(" #")
        if 0 <= hash_at < i:
            return None
        if i + 1 == len(text) or text[i + 1] == " ":
            return i if i > 0 else None
        start = i + 1


def _strip_comment(text: str) -> str:
    i = text.find(" #")
    return (text if i < 0 else text[:i]).strip()
