"""Server-owned message provenance: stamping, reading untrusted metadata, stripping."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from deerflow_extension_api.provenance import (
    CONTENT_KIND_KEY,
    ENTITY_ID_KEY,
    PRODUCER_KIND_KEY,
    ContentKind,
    ProducerKind,
    Provenance,
    SystemOperationKind,
    provenance_kwargs,
    read_provenance,
    strip_provenance,
)


def test_stamp_and_read_back() -> None:
    message = HumanMessage(
        "<system-reminder>today</system-reminder>",
        **provenance_kwargs(
            ContentKind.DYNAMIC_CONTEXT_MEMORY,
            ProducerKind.DYNAMIC_CONTEXT,
            additional_kwargs={"hide_from_ui": True, CONTENT_KIND_KEY: "forged"},
        ),
    )
    assert message.additional_kwargs == {
        "hide_from_ui": True,
        CONTENT_KIND_KEY: "dynamic_context_memory",
        PRODUCER_KIND_KEY: "dynamic_context",
    }
    assert read_provenance(message) == Provenance("dynamic_context_memory", "dynamic_context")
    summary = SystemMessage(
        "summary", **provenance_kwargs("summary", SystemOperationKind.SUMMARIZATION, entity_id="s1")
    )
    assert read_provenance(summary) == Provenance("summary", "summarization", "s1")
    assert read_provenance(summary.model_dump()) == Provenance("summary", "summarization", "s1")


@pytest.mark.parametrize(
    "kwargs",
    [
        {CONTENT_KIND_KEY: ["list"], PRODUCER_KIND_KEY: "x"},
        {CONTENT_KIND_KEY: "Not Valid", PRODUCER_KIND_KEY: "x"},
        {CONTENT_KIND_KEY: "ok"},
        {},
    ],
)
def test_malformed_metadata_reads_as_no_provenance(kwargs: dict[str, object]) -> None:
    assert read_provenance(HumanMessage("hi", additional_kwargs=kwargs)) is None
    assert read_provenance({"additional_kwargs": "nonsense"}) is None


def test_bad_entity_ids_are_dropped_when_read_and_rejected_when_stamped() -> None:
    message = HumanMessage(
        "x",
        additional_kwargs={CONTENT_KIND_KEY: "a", PRODUCER_KIND_KEY: "b", ENTITY_ID_KEY: {"x": 1}},
    )
    assert read_provenance(message) == Provenance("a", "b", None)
    with pytest.raises(ValueError, match="entity id"):
        provenance_kwargs("a", "b", entity_id="")
    with pytest.raises(ValueError, match="content kind"):
        provenance_kwargs("Bad Kind", "b")


def test_strip_removes_only_the_server_owned_keys() -> None:
    caller = {CONTENT_KIND_KEY: "x", PRODUCER_KIND_KEY: "y", ENTITY_ID_KEY: "z", "keep": 1}
    assert strip_provenance(caller) == {"keep": 1}
    assert strip_provenance(None) == {}
