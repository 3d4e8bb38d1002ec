"""web_fetch against real HTTP servers on loopback, and the web_search provider gate."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.tools import ToolException

from runtime.config import WebConfig
from tools.web import BlockedAddressError, check_url, fetch_text, search_available

PAGE = b"<html><head><script>evil()</script></head><body><h1>Title</h1><p>Hello <b>web</b></p></body></html>"


class Handler(http.server.BaseHTTPRequestHandler):
    redirect_to: str | None = None

    def do_GET(self) -> None:
        if self.path == "/redirect" and self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to)
            self.end_headers()
            return
        if self.path == "/big":
            body = b"x" * 50_000
            kind = "text/plain"
        elif self.path == "/binary":
            body, kind = b"\0\1\2", "application/octet-stream"
        elif self.path == "/host":
            body, kind = self.headers.get("Host", "").encode(), "text/plain"
        else:
            body, kind = PAGE, "text/html; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


def serve(host: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("H", (Handler,), {})
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


@pytest.fixture
def sites() -> Iterator[tuple[str, str, type[Handler]]]:
    first, first_url = serve("127.0.0.1")
    second, second_url = serve("127.0.0.2")
    yield first_url, second_url, first.RequestHandlerClass  # type: ignore[misc]
    first.shutdown()
    second.shutdown()


def allowing(*entries: str, **extra: Any) -> WebConfig:
    return WebConfig(allow_private_networks=list(entries), **extra)


async def test_a_loopback_page_is_fetched_as_markdown_when_allow_listed(sites: Any) -> None:
    url, _, _ = sites
    text = await fetch_text(url + "/", allowing("127.0.0.1/32"))
    assert "# Title" in text and "Hello **web**" in text
    assert "evil()" not in text


async def test_loopback_is_refused_without_the_allow_list(sites: Any) -> None:
    url, _, _ = sites
    with pytest.raises(BlockedAddressError, match="loopback"):
        await fetch_text(url + "/", WebConfig())
    with pytest.raises(BlockedAddressError):
        await fetch_text(url.replace("127.0.0.1", "localhost") + "/", WebConfig())


async def test_a_redirect_to_a_private_address_is_refused(sites: Any) -> None:
    url, other, handler = sites
    handler.redirect_to = other + "/"
    with pytest.raises(BlockedAddressError, match=r"127\.0\.0\.2"):
        await fetch_text(url + "/redirect", allowing("127.0.0.1/32"))
    handler.redirect_to = "/"
    assert "# Title" in await fetch_text(url + "/redirect", allowing("127.0.0.1/32"))


async def test_size_type_and_host_rules(sites: Any) -> None:
    url, _, _ = sites
    config = allowing("127.0.0.1/32", fetch_max_bytes=10_000, fetch_max_chars=5_000)
    big = await fetch_text(url + "/big", config)
    assert big.endswith("[content truncated]") and len(big) < 5_100
    with pytest.raises(ToolException, match="application/octet-stream"):
        await fetch_text(url + "/binary", config)
    port = url.rsplit(":", 1)[1]
    assert await fetch_text(url + "/host", config) == f"127.0.0.1:{port}"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
    ],
)
async def test_private_and_metadata_addresses_are_refused_before_connecting(url: str) -> None:
    with pytest.raises(BlockedAddressError):
        await check_url(url, [])


async def test_metadata_stays_refused_even_when_its_network_is_allow_listed() -> None:
    with pytest.raises(BlockedAddressError):
        await check_url("http://169.254.169.254/", ["169.254.0.0/16"])


async def test_only_http_schemes() -> None:
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://x/"):
        with pytest.raises(ToolException, match="only http and https"):
            await check_url(url, [])


def test_web_search_is_offered_only_with_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    assert not search_available(WebConfig())
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    assert search_available(WebConfig())
