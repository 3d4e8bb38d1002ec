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


def ledger_snapshot(
    entries: Sequence[tuple[int, Mapping[str, Any]]], omitted: int
) -> dict[str, Any]:
    """The ``deerflow_receipt_ledger`` snapshot for ``(display number, receipt)`` pairs.

    Why references, not copies: every receipt already sits on its ToolMessage,
    and the snapshot rides every response, so a copy of each receipt in each
    response grows the checkpointed history quadratically (the largest per-step
    cost of the whole chain when it did). A reference is the output hash and
    the tool call id (``"<sha256> <tool_call_id>"``), which is exactly what
    verification matches evidence on; the tool name rides beside it for reports.
    """
    return {
        "ids": [f"r{number}" for number, _ in entries],
        "refs": [f"{r['output_sha256']} {r.get('tool_call_id', '')}" for _, r in entries],
        "tools": [str(r.get("tool", "")) for _, r in entries],
        "omitted": omitted,
    }


def _snapshot_numbers(ids: Any) -> list[int] | None:
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


def _ref_receipts(refs: Any, tools: Any, count: int) -> list[dict[str, Any]] | None:
    if not isinstance(refs, list) or not isinstance(tools, list):
        return None
    if len(refs) != count or len(tools) != count:
        return None
    receipts: list[dict[str, Any]] = []
    for ref, tool in zip(refs, tools, strict=True):
        if not isinstance(ref, str) or not isinstance(tool, str) or len(ref) < 66:
            return None
        sha, space, call_id = ref[:64], ref[64], ref[65:]
        if space != " " or not _SHA256_HEX.match(sha):
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
        receipts = _ref_receipts(raw.get("refs"), raw.get("tools"), len(numbers))
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
