"""Which environment variables may enter a sandboxed command.

Commands are written by a model that may be following injected instructions,
so anything that looks like a credential stays out of their environment:
names matching ``*KEY*``, ``*SECRET*``, ``*TOKEN*``, ``*PASS*`` (the spec's
list) plus a few more shapes that carry credentials in practice (connection
URIs, DSNs, credential files). Matching is case-insensitive. A value that
carries credentials in a URL's user-info part (``postgres://user:pass@host``,
``https://token@host``, under any name such as ``*_URL`` or ``HTTP_PROXY``)
is withheld too, whatever its name. The rule applies to every source, the
server's own environment and an explicit ``env=``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

__all__ = ["DEFAULT_SECRET_ENV_PATTERNS", "filter_env", "looks_secret", "value_has_credentials"]

DEFAULT_SECRET_ENV_PATTERNS: tuple[str, ...] = (
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASS*",
    "*CREDENTIAL*",
    "*PRIVATE*",
    "*_URI",
    "*_DSN",
    "*DATABASE_URL*",
)


# scheme://userinfo@ : userinfo is everything before the first "@" that has no "/" "?" "#".
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]+@")


def value_has_credentials(value: str) -> bool:
    """True when ``value`` contains a URL with a user-info part (user, password or token)."""
    return _URL_USERINFO.search(value) is not None


def looks_secret(name: str, extra_patterns: Iterable[str] = ()) -> bool:
    upper = name.upper()
    return any(
        fnmatch.fnmatchcase(upper, pattern.upper())
        for pattern in (*DEFAULT_SECRET_ENV_PATTERNS, *extra_patterns)
    )


def filter_env(
    *sources: Mapping[str, str] | None, extra_patterns: Iterable[str] = ()
) -> dict[str, str]:
    """Merge ``sources`` (later wins) and drop secret-looking or malformed entries."""
    patterns = tuple(extra_patterns)
    merged: dict[str, str] = {}
    for source in sources:
        for name, value in (source or {}).items():
            if not isinstance(name, str) or not isinstance(value, str):
                continue
            if not name or "=" in name or "\x00" in name or "\x00" in value:
                continue
            if looks_secret(name, patterns) or value_has_credentials(value):
                continue
            merged[name] = value
    return merged
