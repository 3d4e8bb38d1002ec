"""Blocking pods/exec over the official client's websocket (run in worker threads only).

One exec = one websocket. Input is sent as bounded binary frames and never
relies on closing stdin (the v4 protocol cannot signal it); output is read
incrementally with a byte cap, so a huge output never sits whole in memory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream, ws_client
from kubernetes.stream.ws_client import V5_CHANNEL_PROTOCOL

__all__ = ["ExecFailure", "ExecOutcome", "run_exec"]

STDOUT, STDERR, ERROR = 1, 2, 3
STDIN_FRAME = 64 * 1024
MAX_STDERR = 256 * 1024

_HANDSHAKE = re.compile(r"Handshake status (\d{3})")
_SEPARATOR = " -+-+- "  # websocket-client: "Handshake status N Reason -+-+- headers -+-+- body"


class ExecFailure(Exception):
    """The exec did not produce a result.

    ``kind``: ``gone`` (pod missing or not running), ``forbidden`` (RBAC),
    ``unauthorized``, ``rejected`` (other handshake refusal), ``dropped`` (the
    stream broke), ``deadline`` (no result in time), ``unreachable``.
    """

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status


@dataclass
class ExecOutcome:
    stdout: bytes
    stderr: bytes
    status: dict[str, Any]
    stdout_overflow: bool
    protocol: str | None

    @property
    def exit_code(self) -> int:
        """The exit code of the exec'd process, from the error channel's Status."""
        if self.status.get("status") == "Success":
            return 0
        for cause in (self.status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message"))
                except (TypeError, ValueError):
                    break
        return -1


def _websocket_call_without_capture(
    configuration: client.Configuration, method: str, url: str, **kwargs: Any
) -> Any:
    """``websocket_call`` with ``capture_all=False``.

    By default the client also copies every stdout/stderr frame into a capture
    buffer that only ``read_all()`` empties, and ``read_all()`` empties the
    channel buffers too; ``stream()`` offers no way to turn the capture off.
    """
    return ws_client.websocket_call(configuration, method, url, **kwargs, capture_all=False)


# ``stream`` is ``partial(<request>, websocket_call, None)``: the same request
# function over the call above.
_stream = functools.partial(stream.func, _websocket_call_without_capture, None)

_local = threading.local()


def _exec_api(configuration: client.Configuration) -> client.CoreV1Api:
    """A per-thread API object: ``stream()`` temporarily rebinds its client's
    ``call_api``, which must never race with other requests on a shared client."""
    api = getattr(_local, "api", None)
    if api is None or getattr(_local, "configuration", None) is not configuration:
        api = client.CoreV1Api(client.ApiClient(configuration))
        _local.api = api
        _local.configuration = configuration
    return api


def _handshake_failure(exc: ApiException) -> ExecFailure:
    text = str(exc.reason or exc)
    match = _HANDSHAKE.search(text)
    status = int(match.group(1)) if match else None
    message = ""
    parts = text.split(_SEPARATOR)
    if len(parts) >= 3:
        try:
            message = str(json.loads(parts[-1])["message"])
        except (ValueError, KeyError, TypeError):
            message = ""
    detail = message or parts[0]
    if status == 404 or (status == 400 and _not_running(message)):
        return ExecFailure("gone", detail, status)
    if status == 403:
        return ExecFailure("forbidden", detail, status)
    if status == 401:
        return ExecFailure("unauthorized", detail, status)
    if status is None:
        return ExecFailure("unreachable", detail, status)
    return ExecFailure("rejected", detail, status)


def _not_running(message: str) -> bool:
    lowered = message.lower()
    return any(
        needle in lowered
        for needle in (
            "not found",
            "completed pod",
            "not running",
            "is not valid for pod",
            "does not have a host assigned",
            "is terminated",
        )
    )


def run_exec(
    configuration: client.Configuration,
    namespace: str,
    pod: str,
    container: str,
    argv: list[str],
    *,
    stdin: bytes | None,
    deadline: float,
    max_stdout: int,
    on_open: Callable[[Any], None] | None = None,
    stderr_sink: bytearray | None = None,
) -> ExecOutcome:
    """Run ``argv`` in the pod and collect its output until the process ends.

    ``deadline`` is a ``time.monotonic()`` instant; past it the stream is closed
    and ``ExecFailure('deadline')`` raised. Stdout beyond ``max_stdout`` bytes is
    discarded (``stdout_overflow``). ``stderr_sink``, if given, receives stderr
    as it arrives (the caller reads the helper's process id from it).
    """
    api = _exec_api(configuration)
    try:
        ws = _stream(
            api.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=argv,
            container=container,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            tty=False,
            binary=True,
            _preload_content=False,
        )
    except ApiException as exc:
        raise _handshake_failure(exc) from None
    except OSError as exc:
        raise ExecFailure("unreachable", str(exc)) from None
    if on_open is not None:
        on_open(ws)
    protocol = getattr(ws, "subprotocol", None)
    stdout = bytearray()
    stderr = stderr_sink if stderr_sink is not None else bytearray()
    error = bytearray()
    overflow = False

    def drain() -> None:
        nonlocal overflow
        out = ws.read_channel(STDOUT)
        if out:
            room = max_stdout - len(stdout)
            if len(out) > room:
                overflow = True
            if room > 0:
                stdout.extend(out[:room])
        err = ws.read_channel(STDERR)
        if err:
            stderr.extend(err)
            if len(stderr) > MAX_STDERR:
                del stderr[: len(stderr) - MAX_STDERR]
        status = ws.read_channel(ERROR)
        if status:
            error.extend(status)
        # No ``ws.read_all()`` here: it also empties the channel buffers, and
        # each ``read_channel`` of an empty channel pulls in whatever frames
        # arrived meanwhile (stdout included), which it then silently dropped:
        # the intermittent short downloads. The stream is opened with
        # ``capture_all=False``, so there is no capture buffer to reset; frames
        # pulled in here stay buffered for the next drain.

    try:
        if stdin is not None:
            for start in range(0, len(stdin), STDIN_FRAME):
                ws.write_stdin(stdin[start : start + STDIN_FRAME])
                if ws.is_open():
                    ws.update(timeout=0)
                    drain()
            if protocol == V5_CHANNEL_PROTOCOL:
                ws.close_channel(0)
        while ws.is_open():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ExecFailure("deadline", "no result from the sandbox pod in time")
            ws.update(timeout=min(remaining, 1.0))
            drain()
        drain()
    except ExecFailure:
        _close(ws)
        raise
    except Exception as exc:
        _close(ws)
        raise ExecFailure("dropped", f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
    _close(ws)
    if not error:
        raise ExecFailure("dropped", "the exec stream ended without an exit status")
    try:
        status_obj = json.loads(bytes(error).decode("utf-8", "replace"))
    except ValueError:
        raise ExecFailure("dropped", "the exec stream sent an unreadable exit status") from None
    if not isinstance(status_obj, dict):
        raise ExecFailure("dropped", "the exec stream sent an unreadable exit status")
    return ExecOutcome(
        stdout=bytes(stdout),
        stderr=bytes(stderr),
        status=status_obj,
        stdout_overflow=overflow,
        protocol=protocol,
    )


def _close(ws: Any) -> None:
    # Closing a broken socket may raise; there is nothing left to do about it.
    with contextlib.suppress(Exception):
        ws.close()
