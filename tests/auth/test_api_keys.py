"""Static API keys: hashed storage, constant-time matching over every entry."""

from __future__ import annotations

import hashlib

import pytest

import auth.api_keys as api_keys
from auth.api_keys import KEY_PREFIX, hash_api_key, match_api_key, new_api_key
from runtime.config import ApiKeyEntry


def entries(*keys: str) -> list[ApiKeyEntry]:
    return [
        ApiKeyEntry(identity=f"user{index}", sha256=hash_api_key(key))
        for index, key in enumerate(keys)
    ]


def test_new_keys_are_long_random_and_hash_to_sha256() -> None:
    first, second = new_api_key(), new_api_key()
    assert first != second and first.startswith(KEY_PREFIX) and len(first) >= 40
    assert hash_api_key(first) == hashlib.sha256(first.encode()).hexdigest()


def test_match_finds_the_right_entry() -> None:
    configured = entries("k-zero-0123456789", "k-one-0123456789")
    found = match_api_key("k-one-0123456789", configured)
    assert found is not None and found.identity == "user1"
    assert match_api_key("k-two-0123456789", configured) is None
    assert match_api_key("", configured) is None
    assert match_api_key("x" * 10_000, configured) is None


def test_every_entry_is_compared_even_after_a_match(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[bytes] = []
    real = api_keys.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(api_keys.hmac, "compare_digest", spy)
    configured = entries("first-key-0123456789", "second-key-0123456", "third-key-0123456789")
    assert match_api_key("first-key-0123456789", configured) is not None
    assert len(compared) == 3


def test_config_stores_only_valid_digests() -> None:
    with pytest.raises(ValueError, match="64 hex"):
        ApiKeyEntry(identity="a", sha256="dfk_plaintext-key")
    entry = ApiKeyEntry(identity="a", sha256=hash_api_key("k").upper())
    assert entry.sha256 == hash_api_key("k")
    with pytest.raises(ValueError, match="reserved"):
        ApiKeyEntry(identity="default", sha256=hash_api_key("k"))
