"""Public keys from a JWKS URL: fetched asynchronously, cached with a TTL.

Why a cache of our own: PyJWT's ``PyJWKClient`` fetches with blocking
``urllib`` on the caller's thread, which would stall the server's event loop
(``langgraph dev`` raises on it). Here the fetch is an ``httpx`` coroutine,
concurrent lookups share one in-flight fetch, an unknown ``kid`` triggers at
most one early refresh per ``min_refresh_seconds`` (key rotation without a
fetch storm from forged ``kid`` values), and a failed refresh keeps serving
the last good keys until they are ``max_stale_seconds`` old.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt

__all__ = ["JwksCache", "JwksError", "fetch_jwks", "jwks_cache"]

logger = logging.getLogger(__name__)

Fetcher = Callable[[str], Awaitable[dict[str, Any]]]


class JwksError(Exception):
    """The key set cannot be fetched or holds no usable key."""


async def fetch_jwks(url: str) -> dict[str, Any]:
    """GET the JWKS document (async; 5 s timeout)."""
    try:
        async with httpx.AsyncClient(timeout=5.0, follow_redirects=False) as client:
            response = await client.get(url, headers={"accept": "application/json"})
    except httpx.HTTPError as exc:
        raise JwksError(f"fetching the JWKS failed: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise JwksError(f"fetching the JWKS answered HTTP {response.status_code}")
    try:
        data = response.json()
    except ValueError as exc:
        raise JwksError("the JWKS is not JSON") from exc
    if not isinstance(data, dict):
        raise JwksError("the JWKS is not a JSON object")
    return data


@dataclass
class _Entry:
    keys: dict[str | None, jwt.PyJWK] = field(default_factory=dict)
    fetched_at: float = float("-inf")
    attempted_at: float = float("-inf")
    attempts: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _parse(data: dict[str, Any]) -> dict[str | None, jwt.PyJWK]:
    raw_keys = data.get("keys")
    if not isinstance(raw_keys, list):
        raise JwksError("the JWKS has no 'keys' list")
    keys: dict[str | None, jwt.PyJWK] = {}
    for raw in raw_keys:
        if not isinstance(raw, dict) or raw.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK.from_dict(raw)
        except jwt.PyJWTError:
            continue  # unsupported key types are skipped, as RFC 7517 allows
        keys[raw.get("kid") if isinstance(raw.get("kid"), str) else None] = key
    if not keys:
        raise JwksError("the JWKS holds no usable signing key")
    return keys


class JwksCache:
    """Keys per JWKS URL. ``fetch`` and ``clock`` are injectable for tests."""

    def __init__(
        self,
        fetch: Fetcher = fetch_jwks,
        *,
        clock: Callable[[], float] = time.monotonic,
        min_refresh_seconds: float = 30.0,
        retry_seconds: float = 5.0,
        max_stale_seconds: float = 3600.0,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._min_refresh = min_refresh_seconds
        self._retry = retry_seconds
        self._max_stale = max_stale_seconds
        self._entries: dict[str, _Entry] = {}

    def clear(self) -> None:
        self._entries.clear()

    async def get_key(self, url: str, kid: str | None, *, ttl: float) -> jwt.PyJWK:
        """The key for ``kid`` (or the only key when the token names none).

        Raises ``KeyError`` for a key the set does not hold and ``JwksError``
        when no key set could be fetched.
        """
        entry = self._entries.setdefault(url, _Entry())
        now = self._clock()
        if now - entry.fetched_at >= ttl and (
            entry.lock.locked() or now - entry.attempted_at >= self._retry
        ):
            await self._refresh(url, entry, reason="expired")
        if not entry.keys:
            raise JwksError("no signing keys are available")
        key = self._pick(entry, kid)
        if key is None and self._clock() - entry.attempted_at >= self._min_refresh:
            await self._refresh(url, entry, reason="unknown kid")
            key = self._pick(entry, kid)
        if key is None:
            raise KeyError(kid)
        return key

    @staticmethod
    def _pick(entry: _Entry, kid: str | None) -> jwt.PyJWK | None:
        if kid is not None:
            return entry.keys.get(kid)
        if len(entry.keys) == 1:
            return next(iter(entry.keys.values()))
        return None

    async def _refresh(self, url: str, entry: _Entry, *, reason: str) -> None:
        seen = entry.attempts
        async with entry.lock:
            if entry.attempts != seen:
                return  # another request refreshed (or tried to) while we waited
            entry.attempted_at = self._clock()
            try:
                keys = _parse(await self._fetch(url))
            except Exception as exc:  # any failure: keep stale keys or fail closed
                stale_for = self._clock() - entry.fetched_at
                if entry.keys and stale_for < self._max_stale:
                    logger.warning("JWKS refresh (%s) failed, keeping cached keys: %s", reason, exc)
                else:
                    entry.keys = {}
                    logger.error("JWKS refresh (%s) failed: %s", reason, exc)
            else:
                entry.keys = keys
                entry.fetched_at = self._clock()
            finally:
                entry.attempts += 1


jwks_cache = JwksCache()
"""The process-wide cache the authenticate handler uses."""
