"""PiiRedactionMiddleware (optional): deterministic, irreversible placeholders."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from middlewares.pii_redaction import PiiRedactionMiddleware, PiiRedactor, redact_text
from middlewares.tool_transform_meta import tool_transforms
from runtime.config import Settings
from tests.support.agents import chain_for, make_agent, run_config, settings_for
from tests.support.strict_provider import StrictRecordingModel

USER_TEXT = "Mail me at Jane.Doe@example.com or call +1 415-555-0132; card 4111 1111 1111 1111."


def test_off_by_default_and_on_by_config(tmp_path: Path) -> None:
    assert not any(isinstance(m, PiiRedactionMiddleware) for m in chain_for(Settings()))
    chain = chain_for(settings_for(None, pii_redaction={"enabled": True}))
    assert any(isinstance(m, PiiRedactionMiddleware) for m in chain)


async def test_user_messages_in_the_request_and_remote_results_in_state(tmp_path: Path) -> None:
    @tool
    async def web_search(query: str) -> str:
        """Search the web (test tool)."""
        return "Contact: sales@shop.example, server 10.0.0.12, SSN 123-45-6789"

    settings = settings_for(tmp_path, pii_redaction={"enabled": True})
    model = StrictRecordingModel.play(
        [
            {"tool_calls": [{"name": "web_search", "args": {"query": "q"}, "id": "s"}]},
            {"content": "ok"},
        ]
    )
    agent = make_agent(model, [web_search], settings=settings)
    result = await agent.ainvoke({"messages": [HumanMessage(USER_TEXT)]}, run_config())
    sent_user = next(
        m
        for m in model.requests[0]
        if isinstance(m, HumanMessage) and not m.additional_kwargs.get("hide_from_ui")
    )
    assert "Jane.Doe@example.com" not in sent_user.content
    assert "4111" not in sent_user.content and "415-555-0132" not in sent_user.content
    assert (
        "[EMAIL_" in sent_user.content
        and "[CARD_" in sent_user.content
        and "[PHONE_" in sent_user.content
    )
    assert result["messages"][0].content == USER_TEXT  # state keeps the user's text
    stored = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert "sales@shop.example" not in stored.content and "10.0.0.12" not in stored.content
    assert "123-45-6789" not in stored.content
    pii = [t for t in tool_transforms(stored) if t["kind"] == "pii_redaction"]
    assert pii and pii[0]["redacted"] == {"email": 1, "ssn": 1, "ipv4": 1}


def test_placeholders_are_value_derived_and_keyed() -> None:
    first = PiiRedactor().redact("a@b.io")
    assert first == PiiRedactor().redact("A@B.IO")  # same value, same placeholder
    assert first != PiiRedactor().redact("c@b.io")
    assert first != PiiRedactor(hash_key="secret").redact("a@b.io")
    assert "a@b.io" not in first and "b.io" not in first


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("card 4111-1111-1111-1111", "CARD"),
        ("card 4111 1111 1111 1112", None),  # fails Luhn: not a card
        ("ssn 123-45-6789", "SSN"),
        ("ssn 666-45-6789", None),
        ("on 2024-01-15 at 12:30", None),  # dates are not phones
        ("order 12345", None),
        ("iban GB82 WEST 1234 5698 7654 32", "IBAN"),
        ("iban GB00 WEST 1234 5698 7654 32", None),  # bad checksum: not an IBAN
        ("version 1.2.3", None),
        ("host 192.168.1.20", "IP"),
        ("tel (030) 1234 5678", "PHONE"),
        ("mail x.y+z@sub.example.org", "EMAIL"),
    ],
)
def test_detectors(text: str, label: str | None) -> None:
    redacted = redact_text(text)
    labels = {
        kind for kind in ("CARD", "SSN", "IBAN", "IP", "PHONE", "EMAIL") if f"[{kind}_" in redacted
    }
    if label is None:
        assert not labels & {"CARD", "SSN", "IBAN", "IP", "EMAIL"}
        if "1112" in text or "GB00" in text:
            assert "[CARD_" not in redacted and "[IBAN_" not in redacted
        else:
            assert redacted == text
    else:
        assert label in labels


def test_unknown_detector_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown PII detectors"):
        PiiRedactor(["email", "dna"])


def test_redaction_is_idempotent_on_placeholders() -> None:
    once = redact_text(USER_TEXT)
    assert redact_text(once) == once


async def test_original_user_content_copy_is_redacted_too(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, pii_redaction={"enabled": True})
    model = StrictRecordingModel.play([{"content": "ok"}])
    agent = make_agent(model, [], settings=settings)
    text = "<system-reminder>x</system-reminder> write to jane@example.com"
    await agent.ainvoke({"messages": [HumanMessage(text)]}, run_config())
    sent = next(
        m
        for m in model.requests[0]
        if isinstance(m, HumanMessage) and not m.additional_kwargs.get("hide_from_ui")
    )
    assert "jane@example.com" not in str(sent.content)
    assert "jane@example.com" not in sent.additional_kwargs["original_user_content"]
    assert "[EMAIL_" in sent.additional_kwargs["original_user_content"]
