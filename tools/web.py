"""The ``web`` tool group: ``web_fetch(url)`` and ``web_search(query)``.

``web_fetch`` runs in the server process, so it is guarded against reaching
what the server can reach and the user should not (SSRF): only http(s); the
host is resolved first and every address it resolves to must be public (not
private, loopback, link-local, multicast, reserved or a cloud metadata address)
unless ``web.allow_private_networks`` lists it; the connection then goes to the
checked address itself (the name stays in ``Host`` and TLS SNI, and the
certificate is verified against it), so a second DNS answer cannot swap the
target; redirects are followed by hand, at most five, each hop checked the same
way. Bodies are streamed up to ``web.fetch_max_bytes``; HTML becomes markdown
(markdownify), text types pass through, anything else is refused; the text is
capped at ``web.fetch_max_chars``.

``web_search`` goes through a provider interface chosen by ``web.search_use``;
the shipped provider is Tavily (langchain-tavily), offered only when
``TAVILY_API_KEY`` is set. Results of both are remote content: the
ToolResultSanitization middleware neutralises framework markup in them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
from langchain_core.tools import ToolException, tool

from runtime.config import WebConfig, get_settings, import_object

__all__ = [
    "BlockedAddressError",
    "TavilySearchProvider",
    "WebSearchProvider",
    "check_url",
    "fetch_text",
    "search_available",
    "search_provider",
    "web_fetch",
    "web_search",
]

_METADATA = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("fd00:ec2::254"),
    ipaddress.ip_address("100.100.100.200"),
}
_MAX_REDIRECTS = 5
_TEXT_TYPES = (
    "text/plain",
    "text/markdown",
    "application/json",
    "text/csv",
    "application/xml",
    "text/xml",
)
_USER_AGENT = "deerflow-web-fetch/1.0"


class BlockedAddressError(ToolException):
    """The URL resolves to an address web_fetch may not reach."""


def _allowed(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, host: str, allow: list[str]
) -> bool:
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not (
        address in _METADATA
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address in ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT
    )


async def check_url(url: str, allow: list[str]) -> tuple[str, str, int, str]:
    """``(scheme, host, port, address)`` for a URL web_fetch may fetch; raises otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolException(f"only http and https URLs can be fetched, not {parts.scheme!r}")
    host = parts.hostname
    if not host:
        raise ToolException("the URL has no host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ToolException(f"cannot resolve {host!r}: {exc}") from None
    addresses = {ipaddress.ip_address(info[4][0]) for info in infos}
    if not addresses:
        raise ToolException(f"cannot resolve {host!r}")
    for address in addresses:
        if address in _METADATA or (not _public(address) and not _allowed(address, host, allow)):
            raise BlockedAddressError(
                f"refused: {host} resolves to {address}, a private, loopback, link-local or "
                "metadata address (web.allow_private_networks opens specific ones)"
            )
    chosen = sorted(addresses, key=lambda a: a.version)[0]
    return parts.scheme, host, port, str(chosen)


def _pinned(url: str, address: str) -> str:
    parts = urlsplit(url)
    literal = f"[{address}]" if ":" in address else address
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def _to_text(body: bytes, content_type: str, charset: str | None) -> str:
    text = body.decode(charset or "utf-8", errors="replace")
    if content_type in ("text/html", "application/xhtml+xml"):
        from bs4 import BeautifulSoup
        from markdownify import MarkdownConverter

        soup = BeautifulSoup(text, "html.parser")
        for element in soup(["script", "style", "noscript", "template", "iframe", "svg"]):
            element.decompose()
        return str(MarkdownConverter(heading_style="ATX").convert_soup(soup)).strip()
    return text


async def fetch_text(
    url: str, config: WebConfig, *, client: httpx.AsyncClient | None = None
) -> str:
    """The readable text of ``url`` (see the module docstring for every rule)."""
    own = client is None
    http = client or httpx.AsyncClient(timeout=config.fetch_timeout_seconds, follow_redirects=False)
    try:
        current = url
        for _ in range(_MAX_REDIRECTS + 1):
            scheme, host, port, address = await check_url(current, config.allow_private_networks)
            default = port == (443 if scheme == "https" else 80)
            headers = {"Host": host if default else f"{host}:{port}", "User-Agent": _USER_AGENT}
            extensions = {"sni_hostname": host} if scheme == "https" else {}
            request = http.build_request(
                "GET", _pinned(current, address), headers=headers, extensions=extensions
            )
            response = await http.send(request, stream=True)
            try:
                if response.is_redirect:
                    location = response.headers.get("location")
                    if not location:
                        raise ToolException("a redirect without a Location")
                    current = urljoin(current, location)
                    continue
                if response.status_code >= 400:
                    raise ToolException(f"{url} answered HTTP {response.status_code}")
                content_type = (
                    response.headers.get("content-type", "").split(";")[0].strip().lower()
                )
                if content_type not in ("text/html", "application/xhtml+xml", *_TEXT_TYPES):
                    raise ToolException(
                        f"{url} is {content_type or 'of unknown type'}; web_fetch reads text and "
                        "HTML only (download other files in the sandbox instead)"
                    )
                body = bytearray()
                truncated = False
                async for chunk in response.aiter_bytes():
                    body.extend(chunk)
                    if len(body) > config.fetch_max_bytes:
                        truncated = True
                        del body[config.fetch_max_bytes :]
                        break
            finally:
                await response.aclose()
            text = await asyncio.to_thread(
                _to_text, bytes(body), content_type, response.charset_encoding
            )
            if len(text) > config.fetch_max_chars:
                text, truncated = text[: config.fetch_max_chars], True
            note = "\n\n[content truncated]" if truncated else ""
            return f"{text}{note}" if text else "(the page has no readable text)"
        raise ToolException(f"more than {_MAX_REDIRECTS} redirects")
    except httpx.HTTPError as exc:
        raise ToolException(f"fetching {url} failed: {type(exc).__name__}: {exc}") from None
    finally:
        if own:
            await http.aclose()


@tool("web_fetch", parse_docstring=True)
async def web_fetch(url: str) -> str:
    """Fetch a web page and return its readable text (HTML as markdown).

    Args:
        url: The http(s) URL to read.
    """
    return await fetch_text(url, get_settings().web)


class WebSearchProvider(Protocol):
    """``web.search_use`` names a class with this method (constructed with ``search_options``)."""

    async def search(self, query: str, max_results: int) -> list[dict[str, Any]]:
        """Results as ``{"title", "url", "content"}`` mappings."""
        ...


class TavilySearchProvider:
    """Tavily through langchain-tavily; available only with ``TAVILY_API_KEY`` set."""

    def __init__(self, **options: Any) -> None:
        from langchain_tavily import TavilySearch

        self._tool = TavilySearch(**options)

    @staticmethod
    def available() -> bool:
        return bool(os.environ.get("TAVILY_API_KEY"))

    async def search(self, query: str, max_results: int) -> list[dict[str, Any]]:
        raw = await self._tool.ainvoke({"query": query})
        results = raw.get("results", []) if isinstance(raw, dict) else []
        return [
            {"title": r.get("title"), "url": r.get("url"), "content": r.get("content")}
            for r in results[:max_results]
            if isinstance(r, dict)
        ]


def search_available(config: WebConfig) -> bool:
    """Whether ``web_search`` can work (the provider's ``available()``, when it has one)."""
    provider_class = import_object(config.search_use, what="web.search_use")
    available = getattr(provider_class, "available", None)
    return not callable(available) or bool(available())


def search_provider(config: WebConfig) -> Any | None:
    """The configured provider class's instance, or None when it is not available (no key)."""
    provider_class = import_object(config.search_use, what="web.search_use")
    available = getattr(provider_class, "available", None)
    if callable(available) and not available():
        return None
    return provider_class(**config.search_options)


@tool("web_search", parse_docstring=True)
async def web_search(query: str) -> str:
    """Search the web and return the top results (title, URL, snippet).

    Args:
        query: What to search for.
    """
    config = get_settings().web
    provider = search_provider(config)
    if provider is None:
        raise ToolException("web search is not configured on this server")
    results = await provider.search(query, config.search_max_results)
    if not results:
        return "No results."
    return "\n\n".join(
        f"{i}. {r.get('title') or '(untitled)'}\n{r.get('url') or ''}\n{(r.get('content') or '')[:1000]}"
        for i, r in enumerate(results, 1)
    )
