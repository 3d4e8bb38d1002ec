"""Receipt citations: the ledger snapshot a model saw, and checking what it cites against it.

A leaf module (runtime) because both the receipt middleware and the subagent
result builder verify citations: the subagent layer may not import a
middleware.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from runtime.messages import content_text

__all__ = [
    "MAX_CITATION_DIGITS",
    "RECEIPT_FIELDS",
    "RECEIPT_KEY",
    "RECEIPT_LEDGER_KEY",
    "Citation",
    "LedgerSnapshot",
    "ledger_snapshot",
    "parse_citations",
    "read_ledger_snapshot",
    "receipt_ref",
    "verify_citations",
]

RECEIPT_KEY = "deerflow_tool_receipt"
RECEIPT_LEDGER_KEY = "deerflow_receipt_ledger"
RECEIPT_FIELDS = ("tool", "status", "args_sha256", "output_sha256", "timestamp")


def tool_message_text(message: ToolMessage) -> str:
    return content_text(message.content)


MAX_CITATION_DIGITS = 9
_CITATION = re.compile(r"\[r(\d+)(?:\s*:\s*([^\[\]\n]{1,300}))?\]")
_SNAPSHOT_ID = re.compile(rf"^r(\d{{1,{MAX_CITATION_DIGITS}}})$")


@dataclass(frozen=True)
class LedgerSnapshot:
    """The receipts a response saw, by display number (validated)."""

    receipts: dict[int, dict[str, Any]]
    omitted: int


def _valid_receipt_dict(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    if not all(isinstance(raw.get(key), str) for key in RECEIPT_FIELDS):
        return None
    size = raw.get("output_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    return dict(raw)


def _kwargs_of(message: Any) -> Mapping[str, Any]:
    raw = (
        message.additional_kwargs
        if isinstance(message, BaseMessage)
        else (message.get("additional_kwargs") if isinstance(message, Mapping) else None)
    )
    return raw if isinstance(raw, Mapping) else {}


_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_ID_RANGE = re.compile(rf"^r(\d{{1,{MAX_CITATION_DIGITS}}})(?:-r(\d{{1,{MAX_CITATION_DIGITS}}}))?$")


def receipt_ref(receipt: Mapping[str, Any]) -> str:
    """One receipt's reference in a snapshot: ``["<output sha256>", "<tool call id>", "<tool>"]``."""
    return json.dumps(
        [
            str(receipt.get("output_sha256", "")),
            str(receipt.get("tool_call_id", "")),
            str(receipt.get("tool", "")),
        ],
        ensure_ascii=False,
    )


def ledger_snapshot(first: int, refs: Sequence[str], omitted: int) -> dict[str, Any]:
    """The ``deerflow_receipt_ledger`` snapshot: ids ``r<first>``.. with one ``receipt_ref`` each.

    Why this shape: every receipt already sits on its ToolMessage, and the
    snapshot rides every response, so the history is checkpointed with one
    snapshot per step. Copies of the receipts made that grow by a whole ledger
    per step (the largest per-step cost of the chain when it did); a reference
    (output hash and tool call id) is exactly what verification matches
    evidence on, and packing the id range and the references into two strings
    keeps a snapshot to a few values however many receipts it names.
    """
    last = first + len(refs) - 1
    return {
        "ids": f"r{first}" if last == first else f"r{first}-r{last}",
        "refs": "[" + ",".join(refs) + "]",
        "omitted": omitted,
    }


def _snapshot_numbers(ids: Any) -> list[int] | None:
    if isinstance(ids, str):  # a range, "r24-r30" (or one id)
        match = _ID_RANGE.match(ids)
        if match is None:
            return None
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if first < 1 or last < first or last - first > 100_000:
            return None
        return list(range(first, last + 1))
    if not isinstance(ids, list):
        return None
    numbers: list[int] = []
    for display in ids:
        match = _SNAPSHOT_ID.match(display) if isinstance(display, str) else None
        if match is None:
            return None
        numbers.append(int(match.group(1)))
    if numbers and (
        numbers[0] < 1 or numbers != list(range(numbers[0], numbers[0] + len(numbers)))
    ):
        return None
    return numbers


def _ref_receipts(refs: Any, count: int) -> list[dict[str, Any]] | None:
    if not isinstance(refs, str):
        return None
    try:
        parsed = json.loads(refs)
    except ValueError:
        return None
    if not isinstance(parsed, list) or len(parsed) != count:
        return None
    receipts: list[dict[str, Any]] = []
    for ref in parsed:
        if not isinstance(ref, list) or len(ref) != 3 or not all(isinstance(v, str) for v in ref):
            return None
        sha, call_id, tool = ref
        if not _SHA256_HEX.match(sha) or not call_id:
            return None
        receipts.append({"tool": tool, "tool_call_id": call_id, "output_sha256": sha})
    return receipts


def read_ledger_snapshot(message: Any) -> LedgerSnapshot | None:
    """The validated ``deerflow_receipt_ledger`` snapshot of a response, or None.

    Persisted data is revalidated: the ids must form a strictly consecutive
    positive range (not necessarily from ``r1``: older receipts may have been
    omitted or summarized away) and each must carry a well-formed reference
    (``refs``, see ``ledger_snapshot``) or, in snapshots written before
    references, a well-formed receipt copy (``receipts``).
    """
    raw = _kwargs_of(message).get(RECEIPT_LEDGER_KEY)
    if not isinstance(raw, Mapping):
        return None
    omitted = raw.get("omitted", 0)
    if not isinstance(omitted, int) or isinstance(omitted, bool) or omitted < 0:
        return None
    numbers = _snapshot_numbers(raw.get("ids"))
    if numbers is None:
        return None
    if "refs" in raw:
        receipts = _ref_receipts(raw.get("refs"), len(numbers))
        if receipts is None:
            return None
        return LedgerSnapshot(dict(zip(numbers, receipts, strict=True)), omitted)
    copies = raw.get("receipts")
    if not isinstance(copies, list) or len(copies) != len(numbers):
        return None
    by_number: dict[int, dict[str, Any]] = {}
    for number, receipt in zip(numbers, copies, strict=True):
        valid = _valid_receipt_dict(receipt)
        if valid is None or valid.get("id") not in (None, f"r{number}"):
            return None
        by_number[number] = valid
    return LedgerSnapshot(by_number, omitted)


@dataclass(frozen=True)
class Citation:
    """One ``[r<n>]`` / ``[r<n>: anchor]`` claim in model text."""

    number: int
    anchor: str | None

    @property
    def display_id(self) -> str:
        return f"r{self.number}"


def parse_citations(text: str) -> list[Citation]:
    """Citations in ``text``, digit-bounded, deduped by exact ``(id, anchor)``, in order."""
    seen: set[tuple[int, str | None]] = set()
    found: list[Citation] = []
    for match in _CITATION.finditer(text if isinstance(text, str) else ""):
        digits = match.group(1)
        if len(digits) > MAX_CITATION_DIGITS:
            continue  # malformed model output: ignored, never converted
        anchor = match.group(2).strip() if match.group(2) else None
        key = (int(digits), anchor or None)
        if key in seen:
            continue
        seen.add(key)
        found.append(Citation(*key))
    return found


def _tool_evidence(messages: Sequence[Any]) -> dict[tuple[str, str], str]:
    """``(tool_call_id, output_sha256)`` -> text of every receipted tool result present."""
    evidence: dict[tuple[str, str], str] = {}
    for message in messages:
        if isinstance(message, ToolMessage):
            text = tool_message_text(message)
        elif isinstance(message, Mapping) and message.get("type") == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content, default=str)
        else:
            continue
        receipt = _valid_receipt_dict(_kwargs_of(message).get(RECEIPT_KEY))
        call_id = receipt.get("tool_call_id") if receipt else None
        if receipt is not None and isinstance(call_id, str):
            evidence[(call_id, receipt["output_sha256"])] = text
    return evidence


def verify_citations(
    text: str, snapshot: LedgerSnapshot | None, messages: Sequence[Any]
) -> dict[str, Any]:
    """Each citation in ``text`` checked against the ledger the citing turn saw.

    Statuses: ``verified``; ``no_ledger`` (the turn saw no valid ledger);
    ``unknown_id`` (not in that ledger); ``evidence_missing`` (the receipted
    result is no longer in ``messages`` with the same output hash);
    ``anchor_not_found`` (the anchor text is not in that result).
    """
    evidence = _tool_evidence(messages)
    results: list[dict[str, Any]] = []
    for citation in parse_citations(text):
        status = "verified"
        receipt = snapshot.receipts.get(citation.number) if snapshot is not None else None
        if snapshot is None:
            status = "no_ledger"
        elif receipt is None:
            status = "unknown_id"
        else:
            source = evidence.get((str(receipt.get("tool_call_id")), str(receipt["output_sha256"])))
            if source is None:
                status = "evidence_missing"
            elif citation.anchor is not None and citation.anchor not in source:
                status = "anchor_not_found"
        entry: dict[str, Any] = {"id": citation.display_id, "status": status}
        if citation.anchor is not None:
            entry["anchor"] = citation.anchor
        if receipt is not None:
            entry["tool"] = receipt["tool"]
        results.append(entry)
    verified = sum(1 for r in results if r["status"] == "verified")
    return {"citations": results, "verified": verified, "unverified": len(results) - verified}
