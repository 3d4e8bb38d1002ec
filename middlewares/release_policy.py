"""Self-description: what policy a deployment's chain actually enforces.

Configurable middlewares expose ``release_policy_parameters()`` (the duck-typed
``ReleasePolicyProvider``): a JSON-serialisable description of the behaviour
their config selects (limits, switches, normalised paths; never secrets).
``collect_release_policies(chain)`` gathers them, with every entry's position,
name and class (the order is policy too), and a ``policy_hash`` over the whole,
so two deployments can be compared at a glance. ``canonical_hash`` shortens
long text (a prompt, an allowlist) to a stable digest for a declaration.

Update a middleware's declaration whenever its behaviour changes: the hash is
only as honest as the declarations.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from langchain.agents.middleware import AgentMiddleware

__all__ = ["ReleasePolicyProvider", "canonical_hash", "collect_release_policies"]

POLICY_VERSION = 1


@runtime_checkable
class ReleasePolicyProvider(Protocol):
    def release_policy_parameters(self) -> Any: ...


def _canonical_text(value: Any) -> str:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value.replace("\r\n", "\n").replace("\r", "\n"))
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def canonical_hash(value: Any, *, length: int = 16) -> str:
    """``sha256:<hex>`` of ``value``'s canonical form (text: NFC, ``\\n`` newlines; else JSON).

    Equal content hashes equal whatever the key order or newline style;
    ``length`` hex digits are kept (16 = 64 bits, plenty to tell policies apart).
    """
    if not 8 <= length <= 64:
        raise ValueError("canonical_hash length must be between 8 and 64")
    digest = hashlib.sha256(_canonical_text(value).encode("utf-8")).hexdigest()
    return f"sha256:{digest[:length]}"


def _json(value: Any) -> Any:
    """``value`` as plain JSON data (tuples become lists); raises if it is not JSON."""
    return json.loads(json.dumps(value, allow_nan=False, sort_keys=True))


def _describe(position: int, middleware: AgentMiddleware[Any, Any]) -> dict[str, Any]:
    inner = getattr(middleware, "inner", None)
    described = inner if isinstance(inner, AgentMiddleware) else middleware
    cls = type(described)
    entry: dict[str, Any] = {
        "position": position,
        "name": middleware.name,
        "class": f"{cls.__module__}:{cls.__qualname__}",
    }
    entry_point = getattr(middleware, "entry_point", None)
    if isinstance(entry_point, str):
        entry["extension"] = entry_point
    provider = getattr(middleware, "release_policy_parameters", None)
    if callable(provider):
        try:
            entry["parameters"] = _json(provider())
        except (TypeError, ValueError) as exc:
            entry["error"] = f"release_policy_parameters() is not JSON-serialisable: {exc}"
        except Exception as exc:
            entry["error"] = f"release_policy_parameters() failed: {exc!r}"
    return entry


def collect_release_policies(chain: Iterable[AgentMiddleware[Any, Any]]) -> dict[str, Any]:
    """The chain's self-description: JSON that round-trips, hashed canonically.

    Pass the logical chain (``build_middlewares``/``describe_chain``), not the
    fused list handed to ``create_agent``. A provider that fails or returns
    non-JSON data is reported in its entry; it never breaks the description.
    """
    document: dict[str, Any] = {
        "version": POLICY_VERSION,
        "middlewares": [_describe(i, m) for i, m in enumerate(chain)],
    }
    document["policy_hash"] = canonical_hash(document["middlewares"])
    return document
