"""Static API keys for auth mode ``api_key``: stored hashed, compared in constant time.

Keys are long random strings (``new_api_key``), so a plain SHA-256 digest is
the right storage format: there is nothing to brute-force that a slow password
hash would protect. Verification hashes the presented key once and compares
it with *every* configured digest through ``hmac.compare_digest`` without an
early exit, so timing reveals neither which entry matched nor how much of a
digest did.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from runtime.config import ApiKeyEntry

__all__ = ["KEY_PREFIX", "hash_api_key", "match_api_key", "new_api_key"]

KEY_PREFIX = "dfk_"
_MAX_KEY_LENGTH = 512


def hash_api_key(key: str) -> str:
    """The hex SHA-256 of a key: the value that goes into ``auth.api_keys[].sha256``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_api_key() -> str:
    """A fresh key with 256 bits of randomness."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def match_api_key(key: str, entries: Sequence[ApiKeyEntry]) -> ApiKeyEntry | None:
    """The entry whose digest matches ``key``, checking all entries every time."""
    if not key or len(key) > _MAX_KEY_LENGTH:
        return None
    presented = bytes.fromhex(hash_api_key(key))
    found: ApiKeyEntry | None = None
    for entry in entries:
        if hmac.compare_digest(presented, bytes.fromhex(entry.sha256)):
            found = entry
    return found
