"""A stand-in MCP tool for artifact capture tests (the contract in docs/artifacts.md).

``mcp_export`` behaves as an MCP tool after conversion: its metadata carries
``deerflow_mcp`` (set by the MCP layer, never by a caller), its text content
holds the placeholders the MCP layer renders, and its ``artifact`` carries the
raw resources under ``deerflow_resources``.
"""

from __future__ import annotations

import base64
from typing import Any

from langchain_core.tools import StructuredTool

__all__ = ["BLOB", "NOTE", "mcp_export", "not_mcp_export"]

BLOB = bytes(range(256)) * 8 + b"end of blob"
NOTE = "quarterly numbers: 42\n"


def _export(kind: str = "all") -> tuple[str, dict[str, Any]]:
    resources: list[dict[str, Any]] = [
        {
            "uri": "mem://data.bin",
            "mime_type": "application/octet-stream",
            "name": "data.bin",
            "bytes_b64": base64.b64encode(BLOB).decode(),
        },
        {"uri": "mem://notes/q3.txt", "mime_type": "text/plain", "text": NOTE},
        {"uri": "https://example.com/report.pdf", "mime_type": "application/pdf", "name": "report"},
        {"uri": "mem://broken", "bytes_b64": "%%% not base64 %%%"},
    ]
    content = (
        f"[embedded file mem://data.bin, application/octet-stream, ~{len(BLOB)} bytes]\n"
        "[embedded file mem://notes/q3.txt, text/plain]\n"
        "[resource link: report, application/pdf at https://example.com/report.pdf]"
    )
    return content, {"structured_content": None, "deerflow_resources": resources}


mcp_export = StructuredTool.from_function(
    func=_export,
    name="mcp_export",
    description="Export the data set (an MCP tool returning embedded resources).",
    response_format="content_and_artifact",
    metadata={"deerflow_mcp": {"server": "files"}},
)

not_mcp_export = StructuredTool.from_function(
    func=_export,
    name="not_mcp_export",
    description="The same result from a tool the MCP layer did not mark.",
    response_format="content_and_artifact",
)
