"""Shared helpers for the auth tests: configs per auth mode, tokens, raw HTTP."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.tokens import mint_token
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import RequestScopedASGITransport

SECRET = "test-secret-" + "s" * 40
OTHER_SECRET = "other-secret-" + "o" * 40

PROBE_TOOL = {"name": "auth_probe", "group": "test", "use": "tests.support.auth_probe:auth_probe"}
PROBE_SCRIPT = [ai_tools(tool_call("auth_probe")), ai_text("probed")]


def token(sub: str, *, secret: str = SECRET, **kwargs: Any) -> str:
    return mint_token(secret, sub, **kwargs)


def bearer(sub: str, **kwargs: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(sub, **kwargs)}"}


@pytest.fixture
def configure(tmp_path: Path, use_config: Callable[[Path], Path]) -> Callable[..., Path]:
    """``configure(auth={...}, script=[...])``: write a config and make it current."""

    def apply(
        *,
        auth: Mapping[str, Any] | None = None,
        script: list[dict[str, Any]] | None = None,
        probe: bool = False,
    ) -> Path:
        sections: dict[str, Any] = {}
        if auth is not None:
            sections["auth"] = dict(auth)
        if probe:
            sections["tools"] = [PROBE_TOOL]
        path = write_config(
            tmp_path,
            script if script is not None else (PROBE_SCRIPT if probe else [ai_text("hello")]),
            **sections,
        )
        return use_config(path)

    return apply


@pytest.fixture
def jwt_mode(configure: Callable[..., Path]) -> Callable[..., Path]:
    """Switch the session server to auth mode jwt with ``SECRET`` (plus overrides)."""

    def apply(
        *, probe: bool = False, script: list[dict[str, Any]] | None = None, **auth: Any
    ) -> Path:
        settings: dict[str, Any] = {"mode": "jwt", "jwt": {"secret": SECRET}}
        settings.update(auth)
        return configure(auth=settings, probe=probe, script=script)

    return apply


@pytest.fixture
def raw(lg_server: Any) -> Callable[..., httpx.AsyncClient]:
    """Plain httpx over ASGI, for status codes and error bodies."""

    def make(headers: Mapping[str, str] | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=RequestScopedASGITransport(app=lg_server),
            base_url="http://deerflow.test",
            headers=dict(headers or {}),
            timeout=60,
        )

    return make
