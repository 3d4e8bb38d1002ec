"""Reading a provider's ``Retry-After`` hint from an error.

Providers send ``Retry-After`` as seconds (``"3"``, ``"2.5"``) or as an HTTP
date, sometimes ``retry-after-ms`` as milliseconds; SDK errors carry it on
``error.response.headers`` (or ``error.headers``, or a ``retry_after``
attribute). Values are parsed defensively: anything malformed is no hint.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from datetime import UTC
from typing import Any

__all__ = ["parse_retry_after", "retry_after_from_error"]


def parse_retry_after(value: Any, *, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (seconds or HTTP date), else None.

    ``now`` is the current wall-clock time (epoch seconds) for date values; a
    date in the past means "retry now" (0).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def _headers_of(error: Any) -> Mapping[str, Any] | None:
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) if response is not None else None
    if headers is None:
        headers = getattr(error, "headers", None)
    if headers is None or not hasattr(headers, "get"):
        return None
    return headers  # type: ignore[no-any-return]


def retry_after_from_error(error: BaseException, *, now: float) -> float | None:
    """The error's ``Retry-After`` hint in seconds, if it carries a valid one."""
    headers = _headers_of(error)
    if headers is not None:
        try:
            millis = headers.get("retry-after-ms")
            if millis is None:
                millis = headers.get("Retry-After-Ms")
            parsed_ms = parse_retry_after(millis, now=now)
            if parsed_ms is not None:
                return parsed_ms / 1000.0
            value = headers.get("retry-after")
            if value is None:
                value = headers.get("Retry-After")
            parsed = parse_retry_after(value, now=now)
            if parsed is not None:
                return parsed
        except Exception:  # a header object with a broken get() is no hint
            return None
    return parse_retry_after(getattr(error, "retry_after", None), now=now)
