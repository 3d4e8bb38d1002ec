"""Deterministic synopses of oversized tool output (no model involved).

The synopsis is a navigation aid, not a summary: what kind of output it is,
how big, a head and a tail, and where the full text is. Tables get a record
count with the spec's rules (000, "Table synopses"): nonblank CSV/TSV logical
records excluding the header, counted incrementally, only within the
5,000,000 UTF-8-byte guard; a parse or field-limit error, or a table beyond
the guard, gives an *undetermined* count, never a physical-line or sample total
(a quoted field may span lines, so lines are not records).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "RECOGNITION_SAMPLE_CHARS",
    "TABLE_COUNT_BYTE_GUARD",
    "OutputShape",
    "TableCount",
    "TableShape",
    "count_table_records",
    "describe_output",
    "head_tail",
    "recognize_table",
    "render_synopsis",
]

TABLE_COUNT_BYTE_GUARD = 5_000_000
RECOGNITION_SAMPLE_CHARS = 64 * 1024
_SAMPLE_RECORDS = 50
_MIN_DATA_RECORDS = 2
_MAX_HEADER_CELL = 200
_COLUMN_LIST_LIMIT = 24
_NUMBER = re.compile(r"^[-+]?\d[\d.,_]*(?:[eE][-+]?\d+)?$")


@dataclass(frozen=True)
class TableShape:
    """A recognised table: its delimiter and header (from the recognition sample)."""

    kind: Literal["csv", "tsv"]
    delimiter: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class TableCount:
    """Records excluding the header, or ``records=None`` with the reason."""

    records: int | None
    reason: str | None = None


@dataclass(frozen=True)
class OutputShape:
    """What an output is, for the synopsis header and the file extension."""

    kind: Literal["csv", "tsv", "json", "text"]
    description: str
    table: TableShape | None = None
    count: TableCount | None = None

    @property
    def extension(self) -> str:
        return {"csv": "csv", "tsv": "tsv", "json": "json"}.get(self.kind, "txt")


def _nonblank(row: list[str]) -> bool:
    return any(cell.strip() for cell in row)


def recognize_table(text: str) -> TableShape | None:
    """Recognise a CSV/TSV table from a bounded sample of its start.

    The header must have at least two plausible column names, and the sampled
    data records must mostly share its width.
    """
    sample = text[:RECOGNITION_SAMPLE_CHARS]
    truncated = len(text) > len(sample)
    if truncated:
        cut = sample.rfind("\n")
        if cut <= 0:
            return None
        sample = sample[: cut + 1]
    first_line = sample.split("\n", 1)[0]
    for kind, delimiter in (("tsv", "\t"), ("csv", ",")):
        if delimiter not in first_line:
            continue
        rows: list[list[str]] = []
        try:
            for row in csv.reader(io.StringIO(sample), delimiter=delimiter, strict=True):
                if _nonblank(row):
                    rows.append(row)
                if len(rows) > _SAMPLE_RECORDS:
                    break
        except csv.Error:
            # A sample cut mid-record, or a malformed record later on: recognise the
            # table from the records before it; the full count will say undetermined.
            pass
        if len(rows) < 1 + _MIN_DATA_RECORDS:
            continue
        header = rows[0]
        if len(header) < 2:
            continue
        if any(
            not cell.strip()
            or cell[:1].isspace()
            or len(cell) > _MAX_HEADER_CELL
            or _NUMBER.match(cell.strip())
            for cell in header
        ):
            continue
        data = rows[1:]
        matching = sum(1 for row in data if len(row) == len(header))
        if matching < _MIN_DATA_RECORDS or matching < 0.8 * len(data):
            continue
        return TableShape(kind, delimiter, tuple(cell.strip() for cell in header))  # type: ignore[arg-type]
    return None


class _GuardExceeded(Exception):
    pass


def _lines(text: str) -> Iterator[str]:
    """The text's lines, one slice at a time (never a full list of lines)."""
    start = 0
    end_of_text = len(text)
    while start < end_of_text:
        end = text.find("\n", start)
        end = end_of_text if end == -1 else end + 1
        yield text[start:end]
        start = end


def _guarded_lines(text: str, guard: int) -> Iterator[str]:
    consumed = 0
    for line in _lines(text):
        consumed += len(line) if line.isascii() else len(line.encode("utf-8", "surrogatepass"))
        if consumed > guard:
            raise _GuardExceeded
        yield line


def _lines_within_guard(text: str, guard: int) -> Iterator[str]:
    """Lines while the UTF-8 bytes consumed stay within ``guard``, else ``_GuardExceeded``.

    ASCII text (one byte per character) and text too short to reach the guard
    even at four bytes per character need no per-line byte count.
    """
    if (text.isascii() and len(text) <= guard) or len(text) * 4 <= guard:
        return iter(io.StringIO(text))
    return _guarded_lines(text, guard)


def count_table_records(
    text: str, table: TableShape, *, byte_guard: int = TABLE_COUNT_BYTE_GUARD
) -> TableCount:
    """Count nonblank logical records excluding the header, incrementally."""
    if len(text) > byte_guard:
        # Characters never outnumber UTF-8 bytes, so this table is over the guard.
        return TableCount(None, f"the table exceeds the {byte_guard:,}-byte counting guard")
    records = 0
    header_seen = False
    try:
        reader = csv.reader(
            _lines_within_guard(text, byte_guard), delimiter=table.delimiter, strict=True
        )
        for row in reader:
            if not _nonblank(row):
                continue
            if not header_seen:
                header_seen = True
                continue
            records += 1
    except _GuardExceeded:
        return TableCount(None, f"the table exceeds the {byte_guard:,}-byte counting guard")
    except csv.Error as exc:
        return TableCount(None, f"the table could not be parsed ({exc})")
    return TableCount(records)


def _describe_json(text: str) -> str | None:
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")) or len(text) > TABLE_COUNT_BYTE_GUARD:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict):
        keys = [str(k) for k in list(value)[:_COLUMN_LIST_LIMIT]]
        more = ", ..." if len(value) > len(keys) else ""
        return f"JSON object with {len(value):,} top-level keys ({', '.join(keys)}{more})"
    if isinstance(value, list):
        return f"JSON array with {len(value):,} items"
    return None


def describe_output(text: str) -> OutputShape:
    """Recognise the output's kind; tables are counted (see the module docstring)."""
    table = recognize_table(text)
    if table is not None:
        count = count_table_records(text, table)
        columns = list(table.columns[:_COLUMN_LIST_LIMIT])
        more = ", ..." if len(table.columns) > len(columns) else ""
        label = table.kind.upper()
        if count.records is not None:
            counted = f"{count.records:,} records excluding the header"
        else:
            counted = f"record count undetermined: {count.reason}"
        description = (
            f"{label} table, {len(table.columns)} columns ({', '.join(columns)}{more}); {counted}"
        )
        return OutputShape(table.kind, description, table, count)
    json_description = _describe_json(text)
    if json_description is not None:
        return OutputShape("json", json_description)
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return OutputShape("text", f"text, {lines:,} lines")


def head_tail(text: str, head_chars: int, tail_chars: int) -> tuple[str, str]:
    """The start and end of ``text``, snapped to line breaks when one is near."""
    if len(text) <= head_chars + tail_chars:
        return text, ""
    head = text[:head_chars]
    snap = head.rfind("\n")
    if snap > head_chars // 2:
        head = head[: snap + 1]
    tail = text[len(text) - tail_chars :] if tail_chars else ""
    snap = tail.find("\n")
    if 0 <= snap < len(tail) // 2:
        tail = tail[snap + 1 :]
    return head, tail


def render_synopsis(
    text: str,
    *,
    tool_name: str,
    shape: OutputShape,
    head_chars: int,
    tail_chars: int,
    virtual_path: str | None,
    total_bytes: int | None,
    note: str | None = None,
) -> str:
    """The model-visible replacement for an oversized output."""
    size = f"{len(text):,} characters" + (
        f", {total_bytes:,} bytes" if total_bytes is not None else ""
    )
    if virtual_path is not None:
        lead = (
            f"[The full output of `{tool_name}` ({size}) was saved to {virtual_path}. "
            "Read it with read_file, using start_line/end_line to read a part.]"
        )
    else:
        lead = f"[The output of `{tool_name}` ({size}) is too large to show in full.]"
    lines = [lead]
    if note:
        lines.append(f"[{note}]")
    lines.append(f"Kind: {shape.description}.")
    head, tail = head_tail(text, head_chars, tail_chars)
    lines.append(f"--- head ({len(head):,} characters) ---")
    lines.append(head.rstrip("\n"))
    if tail:
        lines.append(f"--- tail ({len(tail):,} characters) ---")
        lines.append(tail.rstrip("\n"))
    lines.append("--- end of synopsis ---")
    return "\n".join(lines)
