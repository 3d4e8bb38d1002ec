"""MCP servers from config as agent tools, through the ``mcp`` SDK and langchain-mcp-adapters.

One ``McpManager`` per process and ``mcp_servers`` config holds one persistent
session per server, started lazily (the first agent build after start-up, from
the graph factory, on the event loop without blocking it) and reused by every
run. A server whose session dies (a crashed stdio process, a dropped HTTP
connection) fails the call in progress as an error tool result and is
reconnected on its next call; a server that is down at discovery contributes no
tools until a later build finds it up (retried with a back-off). Nothing here
can fail a run or the server's start.

Tools keep the server's names; a name another server or a built-in tool already
uses becomes ``<server>_<name>``, with a warning. Header values may reference
the environment (``$VAR`` or ``${VAR}``) so secrets stay out of the config file.

Results become model-visible text (spec 34): text content as is, and every
image, audio, resource link and embedded resource as a placeholder line whose
metadata (name, MIME type, URI) passes ``neutralize_untrusted_tags``, so an MCP
server cannot forge framework markup through a file name. ``isError`` results
and transport failures raise, and ToolErrorHandling turns them into error
results with ``deerflow_tool_meta``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_mcp_adapters.sessions import create_session
from mcp import ClientSession, types

from runtime.config import McpServerConfig, Settings
from runtime.untrusted_content import neutralize_untrusted_tags

__all__ = [
    "MCP_METADATA_TAG",
    "RESOURCES_KEY",
    "McpManager",
    "close_mcp_managers",
    "discover_mcp_tools",
    "get_mcp_manager",
    "mcp_resources",
    "mcp_result_text",
    "resolve_env_refs",
]

logger = logging.getLogger("deerflow.mcp")

MCP_METADATA_TAG = "deerflow_mcp"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_DISCOVERY_BACKOFF = 30.0
_CONNECT_TIMEOUT = 30.0
_MAX_TEXT = 200_000


def resolve_env_refs(value: str) -> str:
    """``$VAR`` / ``${VAR}`` inside ``value`` replaced from the environment (missing: empty)."""
    return _ENV_REF.sub(lambda m: os.environ.get(m.group(1) or m.group(2), ""), value)


def _connection(config: McpServerConfig) -> dict[str, Any]:
    if config.transport == "stdio":
        env = None
        if config.env is not None:
            env = {k: resolve_env_refs(v) for k, v in config.env.items()}
            env.setdefault("PATH", os.environ.get("PATH", ""))
        return {
            "transport": "stdio",
            "command": config.command,
            "args": list(config.args),
            "env": env,
        }
    return {
        "transport": config.transport,
        "url": config.url,
        "headers": {k: resolve_env_refs(v) for k, v in config.headers.items()} or None,
    }


def _safe(text: Any) -> str:
    return neutralize_untrusted_tags(" ".join(str(text).split()))[:500]


RESOURCES_KEY = "deerflow_resources"


def mcp_resources(result: types.CallToolResult) -> list[dict[str, Any]]:
    """Embedded resources and resource links of a result, for ArtifactCaptureMiddleware.

    The shape is the artifact contract's (docs/artifacts.md): ``uri``,
    ``mime_type``, ``name`` and ``bytes_b64`` (an embedded file), ``text`` (an
    embedded text) or neither (a link, recorded by URI, never fetched).
    """
    found: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, types.ResourceLink):
            found.append({"uri": str(block.uri), "mime_type": block.mimeType, "name": block.name})
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            entry: dict[str, Any] = {
                "uri": str(resource.uri),
                "mime_type": resource.mimeType,
                "name": str(resource.uri).rstrip("/").rsplit("/", 1)[-1] or "resource",
            }
            if isinstance(resource, types.TextResourceContents):
                entry["text"] = resource.text
            else:
                entry["bytes_b64"] = getattr(resource, "blob", "")
            found.append(entry)
    return found


def mcp_result_text(result: types.CallToolResult) -> str:
    """What the model sees of a tool result: text, and a placeholder per non-text part."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent):
            size = len(block.data) * 3 // 4
            parts.append(f"[image from the MCP tool: {_safe(block.mimeType)}, ~{size} bytes]")
        elif isinstance(block, types.AudioContent):
            size = len(block.data) * 3 // 4
            parts.append(f"[audio from the MCP tool: {_safe(block.mimeType)}, ~{size} bytes]")
        elif isinstance(block, types.ResourceLink):
            mime = f", {_safe(block.mimeType)}" if block.mimeType else ""
            parts.append(f"[resource link: {_safe(block.name)}{mime} at {_safe(block.uri)}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            mime = f", {_safe(resource.mimeType)}" if resource.mimeType else ""
            if isinstance(resource, types.TextResourceContents):
                parts.append(f"[embedded resource {_safe(resource.uri)}{mime}]\n{resource.text}")
            else:
                size = len(getattr(resource, "blob", "")) * 3 // 4
                parts.append(f"[embedded file {_safe(resource.uri)}{mime}, ~{size} bytes]")
        else:  # a content type this SDK version added: say so, never crash
            parts.append(f"[unsupported MCP content: {_safe(getattr(block, 'type', '?'))}]")
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, default=str))
    text = "\n".join(parts) if parts else "(no output)"
    return text[:_MAX_TEXT]


@dataclass
class _Server:
    """One server's persistent session, owned by a background task."""

    name: str
    config: McpServerConfig
    session: ClientSession | None = None
    task: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _hold(self) -> None:
        try:
            async with create_session(_connection(self.config)) as session:  # type: ignore[arg-type]
                await session.initialize()
                self.session = session
                self.ready.set()
                await self.closing.wait()
        except BaseException as exc:
            self.error = exc
        finally:
            self.session = None
            self.ready.set()

    async def connect(self) -> ClientSession:
        """The live session, (re)starting it if needed."""
        async with self.lock:
            if self.session is not None and self.task is not None and not self.task.done():
                return self.session
            await self._stop()
            self.ready, self.closing, self.error = asyncio.Event(), asyncio.Event(), None
            self.task = asyncio.get_running_loop().create_task(
                self._hold(), name=f"deerflow-mcp-{self.name}"
            )
            try:
                await asyncio.wait_for(self.ready.wait(), _CONNECT_TIMEOUT)
            except TimeoutError:
                await self._stop()
                raise ConnectionError(f"MCP server {self.name!r} did not start in time") from None
            if self.session is None:
                why = f"{type(self.error).__name__}: {self.error}" if self.error else "closed"
                raise ConnectionError(f"MCP server {self.name!r} is unavailable ({why})")
            return self.session

    async def _stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.closing.set()
            try:
                await asyncio.wait_for(asyncio.shield(self.task), 5)
            except (TimeoutError, Exception):
                self.task.cancel()
                with contextlib.suppress(BaseException):
                    await self.task
        self.task = None
        self.session = None

    async def mark_dead(self) -> None:
        async with self.lock:
            await self._stop()


class McpManager:
    """The MCP servers of one config: sessions, discovered tools, calls."""

    def __init__(self, servers: dict[str, McpServerConfig]) -> None:
        self._servers = {
            name: _Server(name, config) for name, config in servers.items() if config.enabled
        }
        self._tools: dict[str, list[BaseTool]] = {}
        self._failed_at: dict[str, float] = {}
        self._discovery = asyncio.Lock()

    @property
    def names(self) -> list[str]:
        return list(self._servers)

    async def discover(self, *, reserved: Iterable[str] = ()) -> None:
        """List the tools of every server not yet known (failed ones after a back-off)."""
        pending = [
            name
            for name in self._servers
            if name not in self._tools
            and time.monotonic() - self._failed_at.get(name, -_DISCOVERY_BACKOFF)
            >= _DISCOVERY_BACKOFF
        ]
        if not pending:
            return
        async with self._discovery:
            taken = set(reserved) | {t.name for tools in self._tools.values() for t in tools}
            for name in pending:
                if name in self._tools:
                    continue
                server = self._servers[name]
                try:
                    session = await server.connect()
                    listed = await asyncio.wait_for(session.list_tools(), server.config.timeout)
                except Exception as exc:
                    self._failed_at[name] = time.monotonic()
                    logger.warning(
                        "MCP server %r is unavailable (%s: %s); its tools are left out until "
                        "it answers",
                        name,
                        type(exc).__name__,
                        exc,
                    )
                    continue
                self._failed_at.pop(name, None)
                self._tools[name] = self._wrap(server, listed.tools, taken)

    def _wrap(self, server: _Server, listed: list[types.Tool], taken: set[str]) -> list[BaseTool]:
        allowed = server.config.tools
        wrapped: list[BaseTool] = []
        for spec in listed:
            if allowed is not None and spec.name not in allowed:
                continue
            name = spec.name
            if name in taken:
                name = f"{server.name}_{spec.name}"
                logger.warning(
                    "MCP tool %r of server %r collides with another tool; offered as %r",
                    spec.name,
                    server.name,
                    name,
                )
            taken.add(name)
            wrapped.append(self._tool(server, spec, name))
        return wrapped

    def _tool(self, server: _Server, spec: types.Tool, name: str) -> BaseTool:
        async def call(**kwargs: Any) -> tuple[str, dict[str, Any]]:
            result = await self.call_result(server.name, spec.name, kwargs)
            resources = mcp_resources(result)
            return mcp_result_text(result), ({RESOURCES_KEY: resources} if resources else {})

        schema = dict(spec.inputSchema or {"type": "object", "properties": {}})
        schema.setdefault("type", "object")
        return StructuredTool(
            name=name,
            description=(spec.description or f"{spec.name} (MCP server {server.name})")[:4000],
            args_schema=schema,
            coroutine=call,
            response_format="content_and_artifact",
            metadata={
                MCP_METADATA_TAG: {"server": server.name, "tool": spec.name},
                "deferred": server.config.deferred,
            },
        )

    def tools(self) -> list[BaseTool]:
        """Every discovered tool (what an agent build offers)."""
        return [tool for name in self._servers for tool in self._tools.get(name, ())]

    async def call(self, server_name: str, tool: str, args: dict[str, Any]) -> str:
        """The tool's result as the model sees it (text with placeholders)."""
        return mcp_result_text(await self.call_result(server_name, tool, args))

    async def call_result(
        self, server_name: str, tool: str, args: dict[str, Any]
    ) -> types.CallToolResult:
        """The raw result; ``isError`` results raise ``ToolException``."""
        server = self._servers[server_name]
        try:
            session = await server.connect()
            result = await asyncio.wait_for(session.call_tool(tool, args), server.config.timeout)
        except TimeoutError:
            # A session that stopped answering is suspect (an HTTP server that went
            # away leaves calls hanging): reconnect on the next call.
            await server.mark_dead()
            raise TimeoutError(
                f"MCP tool {tool!r} of server {server_name!r} did not answer within "
                f"{server.config.timeout:g} s"
            ) from None
        except ConnectionError:
            raise
        except Exception as exc:
            await server.mark_dead()  # reconnect on the next call
            raise ConnectionError(
                f"MCP server {server_name!r} failed during {tool!r} "
                f"({type(exc).__name__}: {exc}); it will be restarted on the next call"
            ) from None
        if result.isError:
            raise ToolException(mcp_result_text(result))
        return result

    async def aclose(self) -> None:
        for server in self._servers.values():
            await server.mark_dead()


_managers: dict[str, McpManager] = {}


def _key(settings: Settings) -> str:
    return json.dumps(
        {name: c.model_dump() for name, c in settings.mcp_servers.items()}, sort_keys=True
    )


def get_mcp_manager(settings: Settings) -> McpManager | None:
    """The manager of ``settings.mcp_servers`` (one per distinct config), or None without any."""
    if not any(c.enabled for c in settings.mcp_servers.values()):
        return None
    key = _key(settings)
    manager = _managers.get(key)
    if manager is None:
        manager = _managers[key] = McpManager(dict(settings.mcp_servers))
    return manager


async def discover_mcp_tools(settings: Settings, reserved: Iterable[str] = ()) -> None:
    """Called by the graph factories before a (sync) build: make the tool list current."""
    manager = get_mcp_manager(settings)
    if manager is not None:
        await manager.discover(reserved=reserved)


async def close_mcp_managers() -> None:
    """Close every session (the HTTP app's lifespan calls this at shutdown)."""
    for manager in list(_managers.values()):
        await manager.aclose()
    _managers.clear()
