"""SandboxAuditMiddleware (spec 12): audit and classify ``bash`` commands before they run.

Classification is **defence in depth and an audit trail, not a security
boundary**: the sandbox is the isolation boundary. Every ``bash`` call is
logged with its verdict; ``block`` refuses the call with an error
``ToolMessage``; ``warn`` runs it and annotates the result.

How a command is judged (``_classify_command``):

- **Pass 1, whole command.** Rules that span a pipe or several statements
  (``| sh``, ``base64 -d | ...``, fork bombs) are matched against the whole
  command, and so are the two *position-blind* contexts that execute their
  input wherever it sits: an ``eval``/``source`` argument, and an interpreter
  code-string flag (``-c`` for shells and ``python``, ``-e`` for
  ``perl``/``ruby``/``node``, ``-p`` for ``perl``/``node``, ``-r`` for ``php``)
  or a here-string (``<<<``) feeding an interpreter.
- **Pass 2, per sub-command.** ``_split_compound_command(split_pipes=True)``
  cuts the command at ``;``, ``&&``, ``||``, ``&``, ``|`` and unquoted
  newlines. Command substitution is judged by *position*: the anchored
  ``_HIGH_RISK_COMMAND_POSITION_PATTERNS`` block a risky substitution only where
  its output becomes the command that runs (``$(curl u)``, ``FOO=1 $(curl u)``,
  ``env $(curl u)``, the word after ``|``). In value position (``x=$(curl u)``,
  ``echo $(curl u)``, a ``for`` word list) it only captures output and passes.
- **Heredoc bodies are data**: the splitter records ``<<EOF``/``<<-EOF``/
  ``<<'EOF'`` headers and consumes their bodies verbatim, so a body line is never
  a command position. ``<<<`` and a ``<<`` inside ``$(( ))``/``(( ))`` do not
  open one. A body fed to an interpreter (``bash <<EOF``, ``python3 - <<EOF``)
  is code, not data, and is judged as such.

- **Rules by meaning.** ``middlewares._shell_lexer.word_value`` reads each
  word as the shell would (quote removal, backslashes, ANSI-C ``$'\\x73h'``,
  ``$@``/``${IFS}``, variables assigned earlier in the command), and
  ``_meaning_block`` judges those values: a shell or stdin-reading interpreter
  after a pipe however it is spelled or wrapped (``"sh"``, ``s''h``, ``$SHELL``,
  ``busybox sh``, ``env bash``, ``timeout 5 sh``), ``>(sh)`` and ``bash <(curl u)``,
  ``eval``/``source`` of decoded text, every path that can name another
  process's ``environ`` (globs included) and ``ps e``, globbed credential
  paths, recursive deletes at the root in any spelling (``rm -r -f //``,
  ``find / -delete``), and fork bombs (recursive background functions,
  ``fork while fork``).

This is a heuristic, not a shell parser, and it is defence in depth: the
sandbox (namespaces locally, the pod on Kubernetes) is the boundary. Where it
is unsure it errs toward *more* command positions (more blocks), never fewer.
Documented gaps: two-step forms (``x=$(curl u); eval "$x"``) would need
dataflow analysis.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares._shell_lexer import (
    Heredoc,
    Segment,
    scan,
    split_compound_command,
    unquote,
    word_value,
    words,
)
from middlewares._tool_meta import blocked_tool_message, ensure_tool_meta

__all__ = ["SandboxAuditMiddleware", "Verdict", "classify_command"]

logger = logging.getLogger(__name__)

Verdict = Literal["block", "warn", "pass"]

BASH_TOOL_NAME = "bash"

# Commands longer than this are refused unaudited: classification must stay
# cheap, and bulk content belongs in write_file, not in a shell command.
_MAX_COMMAND_CHARS = 65_536
# Commands above this size are classified off the event loop.
_OFFLOAD_COMMAND_CHARS = 8_192
# Shell code nested in shell code (``bash -c``, ``eval``, ``bash <<EOF``) is
# judged recursively up to this depth; deeper nesting is refused.
_MAX_NESTING = 4
_AUDIT_LOG_COMMAND_CHARS = 500

# ---------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------

_SHELL = r"(?:ba|z|da|k|mk|a)?sh"
_INTERPRETER = r"(?:python[\d.]*|pypy[\d.]*|perl|ruby|node|nodejs|php)"
# Executables whose output is dangerous to *execute*: fetchers, interpreters,
# decoders. The look-arounds keep ``shasum``, ``ssh``, ``curl-config`` out.
_RISKY_EXECUTABLE = (
    rf"(?<![\w.-])(?:curl|wget|aria2c|nc|ncat|netcat|socat|{_SHELL}|{_INTERPRETER}|base64|xxd)"
    r"(?![\w.-])"
)
# One opener for all three substitution spellings, then the substitution's own
# script up to its first risky executable (a nested ``(`` is allowed once).
_RISKY_SUBSTITUTION = rf"(?:\$\(|<\(|`)[^()`]*?\(?\s*(?:[\w./-]*/)?{_RISKY_EXECUTABLE}"
_EXEC_WRAPPERS = r"(?:env|command|builtin|exec|nohup|time|sudo|doas)"
# An assignment value: quoted strings, simple substitutions, escapes, plain
# characters. Possessive, so long values cannot make the prefix backtrack.
_ASSIGNMENT_VALUE = (
    r"""(?:"(?:[^"\\]|\\.)*"|'[^']*'|\$\([^()]*\)|`[^`]*`|\\.|[^\s"'`\\$]|\$(?!\())*+"""
)
# What may precede the command word while keeping it in command position:
# exec wrappers (with their flags), leading assignments, redirections, and the
# shell's own grammar words. The assignment branch needs whitespace before the
# substitution, so ``x=$(curl u)`` stays in value position.
_COMMAND_POSITION_PREFIX = (
    r"(?:"
    rf"{_EXEC_WRAPPERS}(?:\s+-\S*)*\s+"
    r"|(?:if|then|else|elif|do|while|until)\s+"
    r"|[!({]\s*"
    rf"|[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?={_ASSIGNMENT_VALUE}\s+"
    r"|\d*[<>]{1,2}&?\s*[^\s<>]+\s+"
    r"){0,8}"
)

_HIGH_RISK_COMMAND_POSITION_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(rf'^{_COMMAND_POSITION_PREFIX}"?{_RISKY_SUBSTITUTION}'),
)

_RISKY_SUBSTITUTION_RE = re.compile(_RISKY_SUBSTITUTION)

# Pass 1: matched against the whole command (heredoc *data* removed, whitespace
# collapsed), because they span pipes or statements.
_PIPE_WRAPPERS = rf"(?:(?:{_EXEC_WRAPPERS}|xargs)(?:\s+-\S*)*\s+|[A-Za-z_]\w*=\S*\s+)*"
_HIGH_RISK_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(rf"(?<!\|)\|(?!\|)&?\s*{_PIPE_WRAPPERS}(?:[\w./-]*/)?{_SHELL}(?![\w.-])"),
        "pipes data into a shell",
    ),
    (
        re.compile(
            rf"(?<!\|)\|(?!\|)&?\s*{_PIPE_WRAPPERS}(?:[\w./-]*/)?{_INTERPRETER}(?:\s+-[A-Za-z]+)*(?:\s+-)?\s*"
            r"(?=$|[;&|)]|\d*[<>])"
        ),
        "pipes data into an interpreter reading its program from stdin",
    ),
    (
        re.compile(r"(?<![\w])(?P<fn>[\w:]+)\s*\(\)\s*\{[^}]{0,256}?(?P=fn)\s*\|\s*(?P=fn)\s*&"),
        "fork bomb",
    ),
    (
        re.compile(r"\bwhile\s+(?:true|:|1)\s*;?\s*do\b[^;]*&\s*(?:;\s*)?done\b"),
        "endless background spawning loop",
    ),
)

# Pass 2, searched within each sub-command: destructive or secret-leaking.
_DESTRUCTIVE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![\w.-])mkfs(?:\.\w+)?(?![\w-])"), "formats a filesystem"),
    (
        re.compile(
            r">{1,2}\|?\s*[\"']?/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d)"
        ),
        "overwrites a block device",
    ),
    (re.compile(r"/etc/(?:shadow|gshadow|sudoers)\b"), "touches system credential files"),
    (
        re.compile(r"/proc/(?:\d+|self|\$\$|\$\{?PPID\}?|\*)/environ\b"),
        "reads a process environment",
    ),
    (
        re.compile(r"(?<![\w])(?:LD_PRELOAD|LD_AUDIT|LD_LIBRARY_PATH)\s*="),
        "hijacks the dynamic linker",
    ),
    (re.compile(r"/dev/(?:tcp|udp)/"), "opens a raw network socket through bash"),
    (
        re.compile(r">{1,2}\|?\s*[\"']?/(?:etc|usr|bin|sbin|boot|lib|lib64)/"),
        "overwrites system files",
    ),
    (
        re.compile(r"(?<![\w.-])tee\s+(?:-\S+\s+)*[\"']?/(?:etc|usr|bin|sbin|boot|lib|lib64)/"),
        "overwrites system files",
    ),
    (
        re.compile(
            r">{1,2}\s*[\"']?(?:~|\$HOME|\$\{HOME\})/\.(?:bashrc|bash_profile|bash_login|profile|zshrc|zprofile|zshenv)\b"
        ),
        "overwrites shell startup files",
    ),
)

_MEDIUM_RISK_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"(?<![\w.-])chmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx)(?![\w])"),
        "makes files world-writable",
    ),
    (
        re.compile(r"(?<![\w.-])(?:pip[\d.]*|uv\s+pip|python[\d.]*\s+-m\s+pip)\s+install\b"),
        "installs Python packages",
    ),
    (
        re.compile(
            r"(?<![\w.-])(?:apt|apt-get|yum|dnf|apk|zypper|brew|pacman)\s+(?:-\S+\s+)*(?:install|add|-S)\b"
        ),
        "installs system packages",
    ),
    (re.compile(r"(?<![\w.-])(?:sudo|su|doas)(?![\w.-])"), "asks for elevated privileges"),
    (re.compile(r"(?<![\w$])PATH\+?=|\bexport\s+PATH\b"), "changes PATH"),
    (re.compile(r"(?<![\w.-])crontab(?![\w.-])"), "edits scheduled jobs"),
)

# Position-blind contexts (Pass 1): their arguments are executed wherever the
# substitution sits inside them.
_EVAL_SOURCE_RE = re.compile(r"(?<![\w./-])(?:eval|source)(?=\s)")
_CODE_STRING_FLAG_RES: tuple[re.Pattern[str], ...] = (
    re.compile(
        rf"(?<![\w.-])(?:[\w./-]*/)?(?:{_SHELL}|python[\d.]*|pypy[\d.]*)"
        r"(?:\s+--?[\w-]+)*?\s+-[A-Za-z]*c[A-Za-z]*(?=[\s\"'$`])"
    ),
    re.compile(
        r"(?<![\w.-])(?:[\w./-]*/)?perl(?:\s+--?[\w-]+)*?\s+-[A-Za-z]*[eEp][A-Za-z]*(?=[\s\"'$`])"
    ),
    re.compile(
        r"(?<![\w.-])(?:[\w./-]*/)?ruby(?:\s+--?[\w-]+)*?\s+-[A-Za-z]*e[A-Za-z]*(?=[\s\"'$`])"
    ),
    re.compile(
        r"(?<![\w.-])(?:[\w./-]*/)?(?:node|nodejs)(?:\s+--?[\w-]+)*?\s+"
        r"(?:-[A-Za-z]*[ep][A-Za-z]*|--eval|--print)(?=[\s\"'$`=])"
    ),
    re.compile(
        r"(?<![\w.-])(?:[\w./-]*/)?php(?:\s+--?[\w-]+)*?\s+-[A-Za-z]*r[A-Za-z]*(?=[\s\"'$`])"
    ),
)
_HERE_STRING_RE = re.compile(r"<<<")

_SHELL_NAME_RE = re.compile(rf"^{_SHELL}$")
_INTERPRETER_NAME_RE = re.compile(rf"^{_INTERPRETER}$")
_WRAPPER_NAMES = frozenset({"env", "command", "builtin", "exec", "nohup", "time", "sudo", "doas"})
_GRAMMAR_WORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "("})
_ASSIGNMENT_WORD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_REDIRECTION_WORD_RE = re.compile(r"^\d*(?:[<>]{1,3}|&>{1,2}|>&|<&)")
_HARMLESS_DEVICE_RE = re.compile(r"^/dev/(?:null|zero|stdout|stderr|fd/\d+)$")
_BASE64_DECODE_FLAGS = frozenset({"-d", "-D", "--decode", "-di", "-id"})
_RM_RECURSIVE_FLAG_RE = re.compile(r"^-[A-Za-z]*[rR][A-Za-z]*$")
_RM_PROTECTED_TARGET_RE = re.compile(
    r"^(?:/+\*?|~/?\*?|\$\{?HOME\}?/?\*?|/(?:home|root|etc|usr|bin|sbin|boot|var|lib|lib64|opt|srv|dev|proc|sys|mnt)/?\*?)$"
)

# A trailing exit marker the bash tool appends ("[exit code: 1]", "Exit code: 1").
# A warning goes *before* it, so the marker stays the last line.
_TRAILING_EXIT_MARKER = re.compile(
    r"(?:(?<=\n)|^)[ \t]*(?:\[[^\[\]\n]*\bexit(?:ed)?(?:[ _]code|[ _]status)?\b[^\[\]\n]*?-?\d+[^\[\]\n]*\]"
    r"|exit[ _](?:code|status)[ \t]*[:=]?[ \t]*-?\d+)[ \t]*\n?\Z",
    re.IGNORECASE,
)


class _Classification(NamedTuple):
    verdict: Verdict
    reason: str


_PASS = _Classification("pass", "")

# ---------------------------------------------------------------------------
# Words (the lexer lives in ``middlewares._shell_lexer``)
# ---------------------------------------------------------------------------

_Heredoc = Heredoc
_Segment = Segment
_scan = scan
_split_compound_command = split_compound_command
_words = words
_unquote = unquote


def _command_words(text: str) -> list[str]:
    """The words of a simple command from its command word on.

    Leading assignments, exec wrappers (and their flags), grammar words and
    redirections are skipped, as ``_COMMAND_POSITION_PREFIX`` skips them.
    """
    words = _words(text)
    index = 0
    while index < len(words):
        word = words[index]
        bare = _unquote(word)
        if bare in _GRAMMAR_WORDS or _ASSIGNMENT_WORD_RE.match(word):
            index += 1
            continue
        if bare in _WRAPPER_NAMES:
            index += 1
            while index < len(words) and words[index].startswith("-"):
                index += 1
            continue
        redirection = _REDIRECTION_WORD_RE.match(word)
        if redirection:
            index += 1 if redirection.end() < len(word) else 2
            continue
        break
    return words[index:]


def _basename(word: str) -> str:
    return _unquote(word).rsplit("/", 1)[-1]


def _interpreter_kind(text: str) -> Literal["shell", "other"] | None:
    words = _command_words(text)
    if not words:
        return None
    name = _basename(words[0])
    if _SHELL_NAME_RE.match(name):
        return "shell"
    if _INTERPRETER_NAME_RE.match(name):
        return "other"
    return None


# ---------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------


def _normalize(text: str) -> str:
    return " ".join(text.split())


def _position_blind(extent: str) -> str | None:
    """Reason to block if an eval/source argument, a code string or a here-string
    into an interpreter carries a risky substitution, wherever it sits."""
    found = _EVAL_SOURCE_RE.search(extent)
    if found and _RISKY_SUBSTITUTION_RE.search(extent, found.end()):
        return "an eval/source argument executes a fetched or interpreted substitution"
    for pattern in _CODE_STRING_FLAG_RES:
        found = pattern.search(extent)
        if found and _RISKY_SUBSTITUTION_RE.search(extent, found.end()):
            return "an interpreter code string executes a fetched or interpreted substitution"
    found = _HERE_STRING_RE.search(extent)
    if (
        found
        and _RISKY_SUBSTITUTION_RE.search(extent, found.end())
        and _interpreter_kind(extent) is not None
    ):
        return "a here-string feeds a fetched or interpreted substitution to an interpreter"
    return None


def _destructive_rm(name: str, args: list[str]) -> bool:
    """``rm`` with a recursive flag aimed at the root, a home or a system directory."""
    if name != "rm":
        return False
    recursive = any(_RM_RECURSIVE_FLAG_RE.match(arg) or arg == "--recursive" for arg in args)
    return recursive and any(_RM_PROTECTED_TARGET_RE.match(arg) for arg in args)


def _raw_device_write(name: str, args: list[str]) -> bool:
    """``dd of=/dev/...`` onto anything but the harmless pseudo-devices."""
    return name == "dd" and any(
        arg.startswith("of=/dev/") and not _HARMLESS_DEVICE_RE.match(arg[len("of=") :])
        for arg in args
    )


def _global_npm_install(name: str, args: list[str]) -> bool:
    if name in {"npm", "pnpm"}:
        return bool({"i", "install", "add"} & set(args)) and bool({"-g", "--global"} & set(args))
    return name == "yarn" and args[:2] == ["global", "add"]


# Word-level rules, judged on a sub-command's words from its command word on
# (linear, where an equivalent regex would backtrack on long input).
_HIGH_RISK_WORD_RULES: tuple[tuple[Callable[[str, list[str]], bool], str], ...] = (
    (_destructive_rm, "recursively deletes the root, a home or a system directory"),
    (_raw_device_write, "writes raw data to a device"),
)
_MEDIUM_RISK_WORD_RULES: tuple[tuple[Callable[[str, list[str]], bool], str], ...] = (
    (_global_npm_install, "installs global npm packages"),
)


def _word_rule_hit(
    text: str, rules: tuple[tuple[Callable[[str, list[str]], bool], str], ...]
) -> str | None:
    words = _command_words(text)
    if not words:
        return None
    name = _basename(words[0])
    args = [_unquote(word) for word in words[1:]]
    for rule, reason in rules:
        if rule(name, args):
            return reason
    return None


# ---------------------------------------------------------------------------
# Rules by meaning: words as the shell reads them (``word_value``)
# ---------------------------------------------------------------------------

# Wrappers that run their arguments as a command; the value is how many
# operands (not flags) they take before the command word.
_MEANING_WRAPPERS: dict[str, int] = {
    "env": 0,
    "command": 0,
    "builtin": 0,
    "exec": 0,
    "nohup": 0,
    "time": 0,
    "sudo": 0,
    "doas": 0,
    "nice": 0,
    "ionice": 0,
    "setsid": 0,
    "stdbuf": 0,
    "xargs": 0,
    "busybox": 0,
    "toybox": 0,
    "timeout": 0,  # its duration is skipped as a numeric operand
    "chroot": 1,
    "unshare": 0,
    "script": 0,
    "flock": 1,
}
_SHELL_VARIABLES = frozenset({"$SHELL", "${SHELL}", "$0", "${0}", "$BASH", "${BASH}"})
_ENVIRON_TARGETS = ("/proc/1/environ", "/proc/self/environ", "/proc/12345/environ")
_CREDENTIAL_PATHS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/master.passwd",
    "~/.ssh/id_rsa",
    "~/.ssh/id_ed25519",
    "~/.ssh/id_ecdsa",
    "~/.aws/credentials",
    "~/.netrc",
    "~/.git-credentials",
    "~/.docker/config.json",
    "~/.kube/config",
    "~/.pgpass",
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/run/secrets/kubernetes.io/serviceaccount/token",
)
_GLOB_CHARS = re.compile(r"[*?\[]")
_NUMERIC_OPERAND = re.compile(r"^\d+(?:\.\d+)?[smhd]?$")  # nice -n 5, timeout 10s
_REDIRECT_PREFIX = re.compile(r"^\d*(?:[<>]{1,3}|&>{1,2}|>&|<&)")
_HOME_PREFIX = re.compile(r"^(?:~|\$HOME|\$\{HOME\})(?=/|$)")
_DECODER = re.compile(
    r"base64|xxd|openssl|uudecode|gunzip|zcat|\brev\b|\btr\b|\bprintf\b|\\x[0-9A-Fa-f]|\\[0-7]{3}"
    r"|python|perl|\$'"
)
_FUNCTION_DEF = re.compile(
    r"(?:\bfunction\s+(?P<kw>[^\s(){};|&]+)\s*(?:\(\s*\))?|(?P<fn>[^\s(){};|&<>]+)\s*\(\s*\))"
    r"\s*\{(?P<body>[^{}]{0,512})\}"
)
_CODE_FORK_BOMB = re.compile(
    r"fork\s*(?:\(\s*\))?\s*while\s+fork|while\b[^\n]{0,60}?\bfork\s*\(|for\s*\(\s*;\s*;\s*\)\s*\{?\s*fork"
    r"|\$0\s*[|&]\s*\$0"
)
_PROCESS_SUBSTITUTION_INTO = re.compile(r">\(\s*([^\s()|;&]+)")
_PROCESS_SUBSTITUTION_FROM = re.compile(r"<\(")


def _meaning_words(text: str, variables: dict[str, str]) -> list[str]:
    """The words of a simple command from its command word on, as the shell reads them.

    Like ``_command_words`` but on ``word_value``s, and it also looks through
    wrappers that take operands (``timeout 5 sh``, ``busybox sh``, ``env -i bash``).
    """
    return _from_command_word([word_value(word, variables) for word in _words(text)])


def _from_command_word(values: list[str]) -> list[str]:
    index = 0
    while index < len(values):
        word = values[index]
        name = word.rsplit("/", 1)[-1]
        if word in _GRAMMAR_WORDS or _ASSIGNMENT_WORD_RE.match(word):
            index += 1
            continue
        if name in _MEANING_WRAPPERS:
            index += 1
            operands = _MEANING_WRAPPERS[name]
            while index < len(values) and (
                values[index].startswith("-")
                or _ASSIGNMENT_WORD_RE.match(values[index])
                or _NUMERIC_OPERAND.match(values[index])
            ):
                index += 1
            index += operands
            continue
        redirection = _REDIRECTION_WORD_RE.match(word)
        if redirection:
            index += 1 if redirection.end() < len(word) else 2
            continue
        break
    return values[index:]


def _assignments(segments: list[_Segment]) -> dict[str, str]:
    """``NAME=value`` words seen anywhere in the command (values as the shell reads them)."""
    found: dict[str, str] = {}
    for segment in segments:
        for word in _words(segment.text):
            match = _ASSIGNMENT_WORD_RE.match(word)
            if match is None:
                break
            name = match.group().rstrip("+=").split("[", 1)[0]
            found[name] = word_value(word[match.end() :], found)
    return found


def _is_shell(word: str) -> bool:
    return word in _SHELL_VARIABLES or bool(_SHELL_NAME_RE.match(word.rsplit("/", 1)[-1]))


def _is_interpreter(word: str) -> bool:
    return bool(_INTERPRETER_NAME_RE.match(word.rsplit("/", 1)[-1]))


def _reads_program_from_stdin(args: list[str]) -> bool:
    """No script operand: only flags, or ``-`` / ``-s``."""
    operands = [arg for arg in args if not arg.startswith("-") or arg == "-"]
    return not operands or operands[0] == "-" or "-s" in args


def _path_like(word: str) -> str:
    word = _REDIRECT_PREFIX.sub("", word)
    word = _HOME_PREFIX.sub("~", word)
    word = re.sub(r"/+", "/", word)
    return re.sub(r"/(?:\./)+", "/", word)


def _matches_any(word: str, targets: tuple[str, ...]) -> bool:
    if word in targets:
        return True
    if _GLOB_CHARS.search(word):
        return any(fnmatch.fnmatchcase(target, word) for target in targets)
    return False


def _rm_target_protected(target: str) -> bool:
    cleaned = _path_like(target)
    if cleaned not in ("/", "~"):
        cleaned = re.sub(r"(?:/\.)+/?$", "/", cleaned)
        cleaned = cleaned.rstrip("/") or "/"
    return bool(_RM_PROTECTED_TARGET_RE.match(cleaned))


def _meaning_of_segment(
    segment: _Segment, after_pipe: bool, variables: dict[str, str]
) -> str | None:
    values = [word_value(word, variables) for word in _words(segment.text)]
    words = _from_command_word(values)
    for word in map(_path_like, values):
        if word.startswith("/proc/") and (
            word.endswith("/environ") or _matches_any(word, _ENVIRON_TARGETS)
        ):
            return "reads a process environment"
        if _matches_any(word, _CREDENTIAL_PATHS):
            return "touches credential files"
    if not words:
        return None
    command, args = words[0], words[1:]
    name = command.rsplit("/", 1)[-1]
    if after_pipe and _is_shell(command):
        return "pipes data into a shell"
    if after_pipe and _is_interpreter(command) and _reads_program_from_stdin(args):
        return "pipes data into an interpreter reading its program from stdin"
    if name == "ps" and any(not arg.startswith("-") and "e" in arg for arg in args):
        return "lists other processes' environments"
    if (
        name == "rm"
        and any(_RM_RECURSIVE_FLAG_RE.match(arg) or arg == "--recursive" for arg in args)
        and any(_rm_target_protected(arg) for arg in args if not arg.startswith("-"))
    ):
        return "recursively deletes the root, a home or a system directory"
    if (
        name == "find"
        and args
        and _rm_target_protected(args[0])
        and (
            "-delete" in args
            or any(
                arg == "-exec" and index + 1 < len(args) and args[index + 1].endswith("rm")
                for index, arg in enumerate(args)
            )
        )
    ):
        return "recursively deletes the root, a home or a system directory"
    if name in ("eval", "source", ".") and _DECODER.search(segment.text):
        return "evaluates decoded or generated text"
    if (
        (_is_shell(command) or name in ("source", "."))
        and _PROCESS_SUBSTITUTION_FROM.search(segment.text)
        and _RISKY_SUBSTITUTION_RE.search(segment.text)
    ):
        return "runs a fetched or interpreted process substitution"
    return None


def _meaning_block(command: str, segments: list[_Segment]) -> str | None:
    """Rules judged on what words mean, not how they are spelled (see the module docstring)."""
    variables = _assignments(segments)
    after_pipe = False
    for segment in segments:
        reason = _meaning_of_segment(segment, after_pipe, variables)
        if reason:
            return reason
        after_pipe = segment.ended_by == "|"
    for found in _PROCESS_SUBSTITUTION_INTO.finditer(command):
        target = word_value(found.group(1), variables)
        if _is_shell(target) or _is_interpreter(target):
            return "feeds output to a shell or interpreter through process substitution"
    for found in _FUNCTION_DEF.finditer(command):
        name = found.group("fn") or found.group("kw")
        body = found.group("body")
        if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", body) and re.search(r"[&|]", body):
            return "fork bomb"
    if _CODE_FORK_BOMB.search(command):
        return "fork bomb"
    return None


def _decodes_base64_into_pipe(extent: _Segment) -> bool:
    """A pipeline stage that base64-decodes and hands the result to the next stage."""
    if extent.ended_by != "|":
        return False
    words = [_basename(word) for word in _words(extent.text)]
    for position, word in enumerate(words):
        if word == "base64":
            return any(flag in _BASE64_DECODE_FLAGS for flag in words[position + 1 :])
    return False


def _nested_scripts(extent: str) -> Iterable[str]:
    """Shell code carried inside a command: ``sh -c CODE`` and ``eval ARGS``.

    Words are read as the shell reads them, so ``"sh" -c``, ``s\\h -c``,
    ``busybox sh -c`` and ``eval $'\\x63url ...'`` all give their code.
    """
    words = _meaning_words(extent, {})
    if not words:
        return
    name = words[0].rsplit("/", 1)[-1]
    if name == "eval":
        yield " ".join(words[1:])
        return
    if not _is_shell(words[0]):
        return
    for position, word in enumerate(words[1:], start=1):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            if position + 1 < len(words):
                yield words[position + 1]
            return


def _cut_spans(command: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return command
    pieces: list[str] = []
    position = 0
    for start, end in sorted(spans):
        if start < position:
            continue
        pieces.append(command[position:start])
        position = end
    pieces.append(command[position:])
    return "".join(pieces)


def _worse(a: _Classification, b: _Classification) -> _Classification:
    order = {"pass": 0, "warn": 1, "block": 2}
    return b if order[b.verdict] > order[a.verdict] else a


def _classify_command(command: str, _depth: int = 0) -> _Classification:
    """Classify one command string: Pass 1 whole-command rules, then Pass 2 per sub-command."""
    if _depth > _MAX_NESTING:
        return _Classification("block", "shell code nested too deeply to audit")
    if not command.strip():
        return _PASS

    segments = _scan(command, split_pipes=True, split_nested=True)
    code_heredocs: list[tuple[_Heredoc, Literal["shell", "other"]]] = []
    data_spans: list[tuple[int, int]] = []
    for segment in segments:
        for heredoc in segment.heredocs:
            kind = _interpreter_kind(segment.text)
            if kind is None:
                data_spans.append((heredoc.body_start, heredoc.body_end))
            else:
                code_heredocs.append((heredoc, kind))

    # Pass 1: whole command, heredoc data removed.
    whole = _cut_spans(command, data_spans)
    normalized = _normalize(whole)
    for pattern, reason in _HIGH_RISK_PATTERNS:
        if pattern.search(normalized):
            return _Classification("block", reason)
    extents = _scan(command, split_pipes=True, split_nested=False)
    for extent in extents:
        if _decodes_base64_into_pipe(extent):
            return _Classification("block", "pipes base64-decoded data onward")
        blind = _position_blind(_normalize(extent.text))
        if blind:
            return _Classification("block", blind)

    # Pass 2: each sub-command on its own. Top-level extents are checked too,
    # so a substitution's whole script is seen even where nested splitting cut it.
    for segment in [*segments, *extents]:
        text = _normalize(segment.text)
        if any(pattern.match(text) for pattern in _HIGH_RISK_COMMAND_POSITION_PATTERNS):
            return _Classification(
                "block", "a fetched or interpreted substitution runs in command position"
            )
    for segment in segments:
        text = _normalize(segment.text)
        for pattern, reason in _DESTRUCTIVE_PATTERNS:
            if pattern.search(text):
                return _Classification("block", reason)
        hit = _word_rule_hit(text, _HIGH_RISK_WORD_RULES)
        if hit:
            return _Classification("block", hit)
    meaning = _meaning_block(whole, segments)
    if meaning:
        return _Classification("block", meaning)

    worst = _PASS
    for extent in extents:
        for script in _nested_scripts(extent.text):
            worst = _worse(worst, _classify_command(script, _depth + 1))
            if worst.verdict == "block":
                return worst
    for heredoc, kind in code_heredocs:
        if not heredoc.quoted and _RISKY_SUBSTITUTION_RE.search(heredoc.body):
            return _Classification(
                "block", "a heredoc feeds a fetched or interpreted substitution to an interpreter"
            )
        if kind == "shell":
            worst = _worse(worst, _classify_command(heredoc.body, _depth + 1))
            if worst.verdict == "block":
                return worst

    for segment in segments:
        text = _normalize(segment.text)
        for pattern, reason in _MEDIUM_RISK_PATTERNS:
            if pattern.search(text):
                return _worse(worst, _Classification("warn", reason))
        hit = _word_rule_hit(text, _MEDIUM_RISK_WORD_RULES)
        if hit:
            return _worse(worst, _Classification("warn", hit))
    return worst


def _audit(command: Any) -> _Classification:
    """Validate then classify; never raises (a failure blocks)."""
    if not isinstance(command, str):
        return _Classification("block", "the bash call has no command string")
    if "\x00" in command:
        return _Classification("block", "the command contains a NUL byte")
    if len(command) > _MAX_COMMAND_CHARS:
        return _Classification(
            "block",
            f"the command is longer than {_MAX_COMMAND_CHARS} characters; "
            "write large content with write_file instead",
        )
    try:
        return _classify_command(command)
    except Exception:  # a classifier bug must not crash the run; refuse instead
        logger.exception("sandbox audit: classification failed; blocking the command")
        return _Classification("block", "the command could not be audited")


def classify_command(command: str) -> Verdict:
    """Classify a shell command as ``"block"``, ``"warn"`` or ``"pass"``.

    Public entry point of the spec's classification (see the module docstring).
    Never raises: input that cannot be audited is ``"block"``.
    """
    return _audit(command).verdict


# ---------------------------------------------------------------------------
# Middleware
# ---------------------------------------------------------------------------


def _thread_id(request: ToolCallRequest) -> str | None:
    runtime = request.runtime
    config = getattr(runtime, "config", None)
    if isinstance(config, dict):
        value = (config.get("configurable") or {}).get("thread_id")
        if value:
            return str(value)
    context = getattr(runtime, "context", None)
    if isinstance(context, dict) and context.get("thread_id"):
        return str(context["thread_id"])
    return None


def _insert_before_exit_marker(text: str, note: str) -> str:
    marker = _TRAILING_EXIT_MARKER.search(text)
    if marker is None:
        return f"{text.rstrip()}\n\n{note}" if text.strip() else note
    head = text[: marker.start()].rstrip("\n")
    tail = text[marker.start() :]
    return f"{head}\n\n{note}\n{tail}" if head.strip() else f"{note}\n{tail}"


def _annotate(message: ToolMessage, note: str) -> ToolMessage:
    """Copy ``message`` with ``note`` before its trailing exit marker; metadata kept."""
    content = message.content
    new_content: str | list[str | dict[Any, Any]]
    if isinstance(content, str):
        new_content = _insert_before_exit_marker(content, note)
    else:
        blocks = list(content)
        last = blocks[-1] if blocks else None
        if (
            isinstance(last, dict)
            and last.get("type") == "text"
            and isinstance(last.get("text"), str)
        ):
            text = last["text"]
            if _TRAILING_EXIT_MARKER.search(text):
                blocks[-1] = {**last, "text": _insert_before_exit_marker(text, note)}
            else:
                blocks.append({"type": "text", "text": note})
        elif isinstance(last, str) and _TRAILING_EXIT_MARKER.search(last):
            blocks[-1] = _insert_before_exit_marker(last, note)
        else:
            blocks.append({"type": "text", "text": note})
        new_content = blocks
    return ensure_tool_meta(message.model_copy(update={"content": new_content}))


class SandboxAuditMiddleware(AgentMiddleware[Any, Any, Any]):
    """Audit every ``bash`` call; block high-risk commands, annotate medium-risk ones.

    No config gate: it is appended unconditionally to the runtime base, for the
    lead agent and subagents alike.
    """

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(self, *, tool_names: Iterable[str] = (BASH_TOOL_NAME,)) -> None:
        super().__init__()
        self._tool_names = frozenset(tool_names)

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "tool_names": sorted(self._tool_names),
            "max_command_chars": _MAX_COMMAND_CHARS,
        }

    # -- core -------------------------------------------------------------

    def _applies(self, request: ToolCallRequest) -> bool:
        return request.tool_call.get("name") in self._tool_names

    @staticmethod
    def _command_of(request: ToolCallRequest) -> Any:
        args = request.tool_call.get("args")
        return args.get("command") if isinstance(args, dict) else None

    def _record(self, request: ToolCallRequest, command: Any, result: _Classification) -> None:
        text = command if isinstance(command, str) else repr(command)
        if len(text) > _AUDIT_LOG_COMMAND_CHARS:
            text = f"{text[:_AUDIT_LOG_COMMAND_CHARS]}... ({len(text)} chars)"
        record = {
            "timestamp": datetime.now(UTC).isoformat(),
            "thread_id": _thread_id(request) or "unknown",
            "tool_call_id": request.tool_call.get("id"),
            "command": text,
            "verdict": result.verdict,
            "reason": result.reason or None,
        }
        level = logging.INFO if result.verdict == "pass" else logging.WARNING
        logger.log(level, "sandbox audit %s", json.dumps(record, ensure_ascii=False))

    def _blocked(self, request: ToolCallRequest, result: _Classification) -> ToolMessage:
        name = str(request.tool_call.get("name") or BASH_TOOL_NAME)
        return blocked_tool_message(
            content=(
                f"Error: command blocked by the sandbox audit ({result.reason}). "
                "It was not run. Use a safer alternative: download files and inspect them "
                "instead of executing fetched content."
            ),
            tool_call_id=str(request.tool_call.get("id") or ""),
            name=name,
            error_type="blocked",
            source="sandbox_audit",
        )

    @staticmethod
    def _warning_note(result: _Classification) -> str:
        return (
            f"Warning: the sandbox audit flagged this command as medium risk ({result.reason}); "
            "it may change the runtime environment."
        )

    def _warned(
        self, request: ToolCallRequest, outcome: ToolMessage | Command[Any], result: _Classification
    ) -> ToolMessage | Command[Any]:
        note = self._warning_note(result)
        call_id = request.tool_call.get("id")
        if isinstance(outcome, ToolMessage):
            return _annotate(outcome, note)
        if isinstance(outcome, Command) and isinstance(outcome.update, dict):
            messages = outcome.update.get("messages")
            if isinstance(messages, list):
                patched = [
                    _annotate(m, note)
                    if isinstance(m, ToolMessage) and m.tool_call_id == call_id
                    else m
                    for m in messages
                ]
                return replace(outcome, update={**outcome.update, "messages": patched})
        return outcome

    # -- hooks -------------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        if not self._applies(request):
            return handler(request)
        command = self._command_of(request)
        result = _audit(command)
        self._record(request, command, result)
        if result.verdict == "block":
            return self._blocked(request, result)
        outcome = handler(request)
        return self._warned(request, outcome, result) if result.verdict == "warn" else outcome

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if not self._applies(request):
            return await handler(request)
        command = self._command_of(request)
        if isinstance(command, str) and len(command) > _OFFLOAD_COMMAND_CHARS:
            result = await asyncio.to_thread(_audit, command)
        else:
            result = _audit(command)
        self._record(request, command, result)
        if result.verdict == "block":
            return self._blocked(request, result)
        outcome = await handler(request)
        return self._warned(request, outcome, result) if result.verdict == "warn" else outcome
