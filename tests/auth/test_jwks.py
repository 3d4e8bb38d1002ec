"""JWKS: async fetch from a real local HTTP server, TTL cache, rotation, outages."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from auth.jwks import JwksCache, JwksError, fetch_jwks, jwks_cache
from auth.tokens import CredentialError, verify_token
from runtime.config import JwtAuthConfig
from tests.auth.jwks_server import AUDIENCE, KEY_A, KEY_B, JwksServer, jwk, sign


@pytest.fixture
def server() -> Iterator[JwksServer]:
    jwks_cache.clear()
    with JwksServer() as running:
        yield running
    jwks_cache.clear()


async def test_fetches_over_http_and_verifies(server: JwksServer) -> None:
    config = JwtAuthConfig(jwks_url=server.url, audience=[AUDIENCE])
    assert (await verify_token(sign(KEY_A, "a"), config)).identity == "alice"
    assert (await verify_token(sign(KEY_A, "a", "bob"), config)).identity == "bob"
    assert server.hits == 1  # cached


async def test_rotation_and_unknown_kid(server: JwksServer) -> None:
    config = JwtAuthConfig(jwks_url=server.url, audience=[AUDIENCE])
    cache = JwksCache(min_refresh_seconds=0)
    assert (await verify_token(sign(KEY_A, "a"), config, cache=cache)).identity
    server.document = {"keys": [jwk(KEY_A, "a"), jwk(KEY_B, "b")]}
    assert (await verify_token(sign(KEY_B, "b"), config, cache=cache)).identity  # refetched
    with pytest.raises(CredentialError) as refused:
        await verify_token(sign(KEY_B, "zzz"), config, cache=cache)
    assert refused.value.reason == "unknown signing key"
    # A key under another key's kid fails the signature check.
    with pytest.raises(CredentialError) as wrong:
        await verify_token(sign(KEY_B, "a"), config, cache=cache)
    assert wrong.value.reason == "invalid signature"


async def test_fetch_errors(server: JwksServer) -> None:
    server.status = 500
    with pytest.raises(JwksError, match="HTTP 500"):
        await fetch_jwks(server.url)
    server.status = 200
    server.document = ["not", "an", "object"]
    with pytest.raises(JwksError, match="not a JSON object"):
        await fetch_jwks(server.url)
    with pytest.raises(JwksError, match="ConnectError"):
        await fetch_jwks("http://127.0.0.1:1/jwks.json")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counting_fetcher(documents: list[Any]) -> tuple[Callable[[str], Any], list[int]]:
    calls = [0]

    async def fetch(url: str) -> dict[str, Any]:
        calls[0] += 1
        await asyncio.sleep(0)
        document = documents[min(calls[0], len(documents)) - 1]
        if isinstance(document, Exception):
            raise document
        return document  # type: ignore[no-any-return]

    return fetch, calls


async def test_ttl_refresh_and_rate_limited_unknown_kid() -> None:
    clock = FakeClock()
    fetch, calls = counting_fetcher([{"keys": [jwk(KEY_A, "a")]}, {"keys": [jwk(KEY_B, "b")]}])
    cache = JwksCache(fetch, clock=clock, min_refresh_seconds=30)
    await cache.get_key("u", "a", ttl=300)
    clock.now += 299
    await cache.get_key("u", "a", ttl=300)
    assert calls[0] == 1
    # Unknown kids refresh at most once per min_refresh_seconds (no fetch storm).
    for _ in range(5):
        with pytest.raises(KeyError):
            await cache.get_key("u", "zzz", ttl=300)
    assert calls[0] == 2
    clock.now += 301
    assert (await cache.get_key("u", "b", ttl=300)).key_id == "b"


async def test_concurrent_lookups_share_one_fetch() -> None:
    fetch, calls = counting_fetcher([{"keys": [jwk(KEY_A, "a")]}])
    cache = JwksCache(fetch)
    keys = await asyncio.gather(*(cache.get_key("u", "a", ttl=300) for _ in range(10)))
    assert calls[0] == 1 and len(keys) == 10


async def test_outage_keeps_stale_keys_then_fails_closed() -> None:
    clock = FakeClock()
    fetch, calls = counting_fetcher(
        [{"keys": [jwk(KEY_A, "a")]}, JwksError("down"), JwksError("down"), JwksError("down")]
    )
    cache = JwksCache(fetch, clock=clock, retry_seconds=5, max_stale_seconds=3600)
    await cache.get_key("u", "a", ttl=60)
    clock.now += 61
    assert (await cache.get_key("u", "a", ttl=60)).key_id == "a"  # stale but served
    assert calls[0] == 2
    await cache.get_key("u", "a", ttl=60)
    assert calls[0] == 2  # failures retried at most every retry_seconds
    clock.now += 3600
    with pytest.raises(JwksError):
        await cache.get_key("u", "a", ttl=60)
    with pytest.raises(JwksError):
        await cache.get_key("u", "a", ttl=60)
    assert calls[0] == 3


async def test_unusable_documents() -> None:
    fetch, _ = counting_fetcher([{"keys": [{"kty": "oct", "k": "abc", "use": "enc"}]}])
    cache = JwksCache(fetch)
    with pytest.raises(JwksError):
        await cache.get_key("u", None, ttl=60)
    fetch, _ = counting_fetcher([{"nokeys": True}])
    with pytest.raises(JwksError):
        await JwksCache(fetch).get_key("u", None, ttl=60)
    fetch, _ = counting_fetcher([{"keys": [jwk(KEY_A, "a"), jwk(KEY_B, "b")]}])
    with pytest.raises(KeyError):  # no kid in the token and more than one key: ambiguous
        await JwksCache(fetch).get_key("u", None, ttl=60)
