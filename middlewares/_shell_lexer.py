"""A shell lexer for the sandbox audit: sub-commands, words, and words as the shell reads them.

Not a shell parser: it knows quotes, backslashes, ``$( )``/backticks/``(( ))``,
process substitution and here-documents well enough to cut a command line into
sub-commands (``scan``) and words (``words``), and to compute what a word
becomes after quote removal, backslash escapes, ANSI-C quoting (``$'\\x73h'``)
and simple parameter expansions (``word_value``). The audit's rules
(``middlewares.sandbox_audit``) judge what this module produces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Heredoc",
    "Segment",
    "consume_heredoc_bodies",
    "parse_heredoc_header",
    "scan",
    "split_compound_command",
    "unquote",
    "word_value",
    "words",
]


@dataclass
class Heredoc:
    """One ``<<`` here-document: its header and the body consumed verbatim."""

    delimiter: str
    strip_tabs: bool
    quoted: bool
    body: str = ""
    terminated: bool = False
    body_start: int = -1
    body_end: int = -1


@dataclass
class Segment:
    """One sub-command. ``text`` excludes heredoc bodies and line continuations."""

    text: str
    heredocs: list[Heredoc] = field(default_factory=list)
    ended_by: str = ""

    def verbatim(self) -> str:
        parts = [self.text]
        for heredoc in self.heredocs:
            parts.append("\n" + heredoc.body if heredoc.body else "")
            if heredoc.terminated:
                parts.append("\n" + heredoc.delimiter)
        return "".join(parts)


@dataclass
class _Context:
    kind: Literal["sq", "dq", "sub", "bq", "arith"]
    depth: int = 0


def parse_heredoc_header(command: str, start: int) -> tuple[Heredoc, int] | None:
    """Parse ``<<[-]WORD`` at ``start``; return the heredoc and the index after WORD."""
    index = start + 2
    length = len(command)
    strip_tabs = index < length and command[index] == "-"
    if strip_tabs:
        index += 1
    while index < length and command[index] in " \t":
        index += 1
    delimiter: list[str] = []
    quoted = False
    while index < length:
        char = command[index]
        if char in " \t\n;&|<>()":
            break
        if char == "'":
            quoted = True
            end = command.find("'", index + 1)
            end = length if end == -1 else end
            delimiter.append(command[index + 1 : end])
            index = end + 1
            continue
        if char == '"':
            quoted = True
            index += 1
            while index < length and command[index] != '"':
                if command[index] == "\\" and index + 1 < length:
                    index += 1
                delimiter.append(command[index])
                index += 1
            index += 1
            continue
        if char == "\\":
            quoted = True
            if index + 1 < length:
                delimiter.append(command[index + 1])
            index += 2
            continue
        delimiter.append(char)
        index += 1
    word = "".join(delimiter)
    if not word:
        return None
    return Heredoc(delimiter=word, strip_tabs=strip_tabs, quoted=quoted), min(index, length)


def consume_heredoc_bodies(command: str, start: int, pending: list[Heredoc]) -> int:
    """Consume the bodies of ``pending`` from ``start``; return where scanning resumes.

    An unterminated body consumes the rest of the string (as the shell does).
    """
    index = start
    length = len(command)
    for heredoc in pending:
        heredoc.body_start = index
        lines: list[str] = []
        while index < length:
            end = command.find("\n", index)
            line_end = length if end == -1 else end
            line = command[index:line_end]
            candidate = line.lstrip("\t") if heredoc.strip_tabs else line
            if candidate == heredoc.delimiter:
                heredoc.terminated = True
                heredoc.body_end = index
                index = line_end + 1 if end != -1 else length
                break
            lines.append(line)
            index = line_end + 1 if end != -1 else length
        else:
            heredoc.body_end = length
        if not heredoc.terminated:
            heredoc.body_end = length
        heredoc.body = "\n".join(lines)
    pending.clear()
    return index


class _Lexer:
    """One left-to-right pass over a command; see ``scan``."""

    def __init__(self, command: str, *, split_pipes: bool, split_nested: bool) -> None:
        self.command = command
        self.split_pipes = split_pipes
        self.split_nested = split_nested
        self.segments: list[Segment] = []
        self.current: list[str] = []
        self.current_heredocs: list[Heredoc] = []
        self.pending: list[Heredoc] = []
        self.stack: list[_Context] = []
        self.arith_open = 0  # arithmetic contexts on the stack (no scan of the stack per char)
        self.index = 0

    # --- state ------------------------------------------------------------------

    def close_segment(self, separator: str = "") -> None:
        text = "".join(self.current).strip()
        if text or self.current_heredocs:
            self.segments.append(
                Segment(text=text, heredocs=self.current_heredocs, ended_by=separator)
            )
        self.current = []
        self.current_heredocs = []

    def top(self) -> str | None:
        return self.stack[-1].kind if self.stack else None

    def push(self, kind: Literal["sq", "dq", "sub", "bq", "arith"]) -> None:
        self.stack.append(_Context(kind))
        self.arith_open += kind == "arith"

    def pop(self) -> None:
        self.arith_open -= self.stack.pop().kind == "arith"

    def take(self, text: str, *, width: int | None = None) -> None:
        self.current.append(text)
        self.index += len(text) if width is None else width

    # --- per character ------------------------------------------------------------

    def run(self) -> list[Segment]:
        command = self.command
        while self.index < len(command):
            kind = self.top()
            if kind == "sq":
                self._single_quoted()
            elif command[self.index] == "\\":
                self._backslash()
            elif kind == "dq":
                self._double_quoted()
            elif not self._opens_or_closes(kind):
                self._plain(kind)
        self.close_segment()
        return self.segments

    def _next(self) -> str:
        index = self.index + 1
        return self.command[index] if index < len(self.command) else ""

    def _single_quoted(self) -> None:
        if self.command[self.index] == "'":
            self.pop()
        self.take(self.command[self.index])

    def _backslash(self) -> None:
        if self._next() == "\n":  # line continuation: joins lines, never splits
            self.index += 2
            return
        self.take(self.command[self.index : self.index + 2], width=2)

    def _double_quoted(self) -> None:
        command, char = self.command, self.command[self.index]
        if char == '"':
            self.pop()
            self.take(char)
        elif command.startswith("$((", self.index):
            self.push("arith")
            self.take("$((")
        elif char == "$" and self._next() == "(":
            self.push("sub")
            self.take("$(")
        elif char == "`":
            self.push("bq")
            self.take(char)
        else:
            self.take(char)

    def _opens_or_closes(self, kind: str | None) -> bool:
        """Quotes and substitutions that open or close here; True when consumed."""
        command, index = self.command, self.index
        char, nxt = command[index], self._next()
        if char in "'\"":
            self.push("sq" if char == "'" else "dq")
            self.take(char)
            return True
        if char == "`":
            if kind == "bq":
                self.pop()
            else:
                self.push("bq")
            self.take(char)
            return True
        if command.startswith("$((", index):
            self.push("arith")
            self.take("$((")
            return True
        if (
            char in "$<>"
            and nxt == "("
            and not (char == "<" and index > 0 and command[index - 1] == "<")
        ):
            self.push("sub")
            self.take(char + "(")
            return True
        if kind == "arith":
            return self._arith_paren(char, nxt)
        if char == "(" and nxt == "(" and kind != "bq":
            self.push("arith")
            self.take("((")
            return True
        if kind == "sub" and char in "()":
            context = self.stack[-1]
            if char == "(":
                context.depth += 1
            elif context.depth > 0:
                context.depth -= 1
            else:
                self.pop()
        return False

    def _arith_paren(self, char: str, nxt: str) -> bool:
        context = self.stack[-1]
        if char == "(":
            context.depth += 1
        elif char == ")":
            if context.depth > 0:
                context.depth -= 1
            elif nxt == ")":
                self.pop()
                self.take("))")
                return True
            else:
                self.pop()
        return False

    def _plain(self, kind: str | None) -> None:
        """Unquoted, or inside a substitution / backticks / arithmetic."""
        command, index = self.command, self.index
        char, nxt = command[index], self._next()
        if char == "<" and nxt == "<" and self._heredoc():
            return
        if char == "\n":
            resume = (
                consume_heredoc_bodies(command, index + 1, self.pending)
                if self.pending
                else index + 1
            )
            if not self.stack or self.split_nested:
                self.close_segment("\n")
            else:
                self.current.append("\n")
            self.index = resume
            return
        if (not self.stack or self.split_nested) and self._separator(char, nxt):
            return
        self.take(char)

    def _heredoc(self) -> bool:
        command, index = self.command, self.index
        if (
            self.arith_open > 0
            or command.startswith("<", index + 2)
            or (index > 0 and command[index - 1] == "<")
        ):
            return False
        parsed = parse_heredoc_header(command, index)
        if parsed is None:
            self.take("<<")
            return True
        heredoc, end = parsed
        self.current.append(command[index:end])
        self.current_heredocs.append(heredoc)
        self.pending.append(heredoc)
        self.index = end
        return True

    def _separator(self, char: str, nxt: str) -> bool:
        command, index = self.command, self.index
        if command.startswith("&&", index) or command.startswith("||", index):
            self.close_segment(command[index : index + 2])
            self.index += 2
            return True
        if char == ";":
            self.close_segment(";")
            self.index += 1
            return True
        if char == "|":
            if not self.split_pipes:
                return False
            self.close_segment("|")
            self.index += 2 if nxt == "&" else 1
            return True
        if char == "&" and nxt != ">" and not (index > 0 and command[index - 1] in "<>|"):
            self.close_segment("&")
            self.index += 1
            return True
        return False


def scan(command: str, *, split_pipes: bool, split_nested: bool) -> list[Segment]:
    """Quote-, substitution- and heredoc-aware split of ``command`` into sub-commands.

    ``split_nested`` also splits inside ``$( )``/backticks/``(( ))`` (whose
    separators start new command positions of the inner script); without it
    only top-level separators split, which gives a whole command's extent.
    """
    return _Lexer(command, split_pipes=split_pipes, split_nested=split_nested).run()


def split_compound_command(command: str, *, split_pipes: bool = False) -> list[str]:
    """Split ``command`` into sub-commands (heredoc bodies kept verbatim with theirs).

    Sequencing operators (``;``, ``&&``, ``||``, ``&``) and unquoted newlines
    split; ``split_pipes=True`` also splits at ``|``, since the word after a
    pipe is a new command position. Quotes are respected; separators inside
    ``$( )``/backticks split too, because they start commands of the inner
    script. An unclosed quote keeps the rest as one last sub-command.
    """
    return [
        segment.verbatim() for segment in scan(command, split_pipes=split_pipes, split_nested=True)
    ]


# ---------------------------------------------------------------------------
# Words
# ---------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """Whitespace-separated words, keeping quoted strings and substitutions whole."""
    words: list[str] = []
    current: list[str] = []
    quote: str | None = None
    depth = 0
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if quote == "'":
            current.append(char)
            if char == "'":
                quote = None
        elif char == "\\" and index + 1 < length:
            current.append(text[index : index + 2])
            index += 2
            continue
        elif quote == '"':
            current.append(char)
            if char == '"':
                quote = None
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char == "(":
            depth += 1
            current.append(char)
        elif char == ")":
            depth = max(0, depth - 1)
            current.append(char)
        elif char.isspace() and depth == 0:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(char)
        index += 1
    if current:
        words.append("".join(current))
    return words


def unquote(word: str) -> str:
    """Remove one level of shell quoting from ``word`` (no expansion)."""
    out: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(word):
        char = word[index]
        if quote == "'":
            if char == "'":
                quote = None
            else:
                out.append(char)
        elif char == "\\" and index + 1 < len(word):
            out.append(word[index + 1])
            index += 1
        elif quote == '"':
            if char == '"':
                quote = None
            else:
                out.append(char)
        elif char in "'\"":
            quote = char
        else:
            out.append(char)
        index += 1
    return "".join(out)


_ANSI_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI_C_NUMERIC = re.compile(r"x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.")
_PARAMETER = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*|[@*#?$!0-9-])\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*|[@*#?$!0-9-]))"
)


def _ansi_c(body: str) -> str:
    """Decode the inside of ``$'...'`` as bash does."""
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\" or index + 1 >= len(body):
            out.append(char)
            index += 1
            continue
        escape = body[index + 1]
        if escape in _ANSI_C_ESCAPES:
            out.append(_ANSI_C_ESCAPES[escape])
            index += 2
            continue
        numeric = _ANSI_C_NUMERIC.match(body, index + 1)
        if numeric is None:
            out.append(char)
            index += 1
            continue
        token = numeric.group()
        if token[0] in "xuU":
            code = int(token[1:], 16)
        elif token[0] == "c":
            code = ord(token[1]) & 0x1F
        else:
            code = int(token, 8)
        out.append(chr(code) if code < 0x110000 else "\ufffd")
        index = numeric.end()
    return "".join(out)


def word_value(word: str, variables: dict[str, str] | None = None) -> str:
    """What ``word`` becomes for the shell: quotes removed, escapes and ``$'...'`` decoded.

    ``$NAME``/``${NAME}`` expand from ``variables`` (assignments seen earlier
    in the command); other expansions stay as written, except the ones that
    are empty or blank in a fresh shell (``$@``, ``$*``, ``${IFS}``), which
    are how names get split to dodge a reader (``s$@h``, ``cat${IFS}x``).
    """
    known = variables or {}
    out: list[str] = []
    quote: str | None = None
    index = 0
    length = len(word)
    while index < length:
        char = word[index]
        if quote == "'":
            if char == "'":
                quote = None
            else:
                out.append(char)
            index += 1
            continue
        if char == "\\" and index + 1 < length:
            following = word[index + 1]
            if quote != '"' or following in '$`"\\\n':
                out.append(following)
            else:
                out.append(char + following)
            index += 2
            continue
        if quote is None and word.startswith("$'", index):
            end = index + 2
            while end < length and word[end] != "'":
                end += 2 if word[end] == "\\" else 1
            out.append(_ansi_c(word[index + 2 : end]))
            index = end + 1
            continue
        if quote is None and word.startswith('$"', index):
            quote = '"'
            index += 2
            continue
        if char == "$":
            parameter = _PARAMETER.match(word, index)
            if parameter is not None:
                name = parameter.group("braced") or parameter.group("bare")
                if name in ("@", "*"):
                    pass
                elif name == "IFS":
                    out.append(" ")
                elif name in known:
                    out.append(known[name])
                else:
                    out.append(parameter.group())
                index = parameter.end()
                continue
        if char in "'\"" and quote is None:
            quote = char
        elif char == '"' and quote == '"':
            quote = None
        else:
            out.append(char)
        index += 1
    return "".join(out)
