"""``run_exec``'s reading of the exec stream (``sandbox/_k8s_exec.py``).

The short downloads seen on the fake cluster came from the client side: each
``read_channel`` of an empty channel runs an ``update()`` that may buffer frames
of *other* channels (stdout included), and ``read_all()`` then emptied every
channel buffer, dropping them. These tests drive ``run_exec`` through the real
``stream()`` path and the client's own channel buffering, with a websocket that
delivers exactly one frame per ``update()``: the frames the implicit updates
pull in must still reach the result.
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

import pytest
from kubernetes import client
from kubernetes.stream import ws_client

from sandbox._k8s_exec import ERROR, STDERR, STDOUT, run_exec

SUCCESS = json.dumps({"metadata": {}, "status": "Success"}).encode()


class OneFramePerUpdate(ws_client.WSClient):
    """The client's ``WSClient`` with a scripted socket: one frame per ``update()``.

    Only the socket is replaced; ``read_channel``, ``peek_channel`` and
    ``read_all`` are the library's own, so their buffering is what is tested.
    """

    script: ClassVar[list[tuple[int, bytes]]] = []
    opened: ClassVar[list[OneFramePerUpdate]] = []

    def __init__(
        self,
        configuration: Any,
        url: str,
        headers: Any,
        capture_all: bool,
        binary: bool = False,
    ) -> None:
        self._connected = True
        self._channels: dict[int, Any] = {}
        self._closed_channels: set[int] = set()
        self.subprotocol = ws_client.V4_CHANNEL_PROTOCOL
        self.binary = binary
        self.newline = b"\n" if binary else "\n"
        self.capture_all = capture_all
        self._all: Any = ws_client.BytesIO() if capture_all else ws_client._IgnoredIO()
        self._returncode = None
        self.url = url
        self.frames = list(self.script)
        self.opened.append(self)

    def update(self, timeout: float | None = 0) -> None:
        if not self._connected:
            return
        if not self.frames:  # the server closes after the status frame
            self._connected = False
            return
        channel, data = self.frames.pop(0)
        if channel in (STDOUT, STDERR):
            self._all.write(data)
        self._channels[channel] = self._channels.get(channel, b"") + data

    def close(self, **kwargs: Any) -> None:
        self._connected = False


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> type[OneFramePerUpdate]:
    OneFramePerUpdate.opened = []
    monkeypatch.setattr(ws_client, "WSClient", OneFramePerUpdate)
    return OneFramePerUpdate


def _run(max_stdout: int = 1 << 20) -> Any:
    configuration = client.Configuration(host="http://cluster.invalid")
    return run_exec(
        configuration,
        "deerflow-sandbox",
        "pod-1",
        "sandbox",
        ["cat", "/mnt/user-data/outputs/report.bin"],
        stdin=None,
        deadline=time.monotonic() + 30,
        max_stdout=max_stdout,
    )


def test_frames_pulled_in_while_draining_are_kept(scripted: type[OneFramePerUpdate]) -> None:
    # The loop's update() brings a stdout frame; draining it reads stderr and
    # the status channel, each of whose implicit update() brings the next frame.
    scripted.script = [
        (STDOUT, b"A" * 1000),
        (STDOUT, b"B" * 1000),  # arrives during read_channel(STDERR)
        (STDERR, b"pid 42\n"),  # arrives during read_channel(ERROR)
        (STDOUT, b"C" * 1000),
        (STDOUT, b"D" * 1000),
        (STDOUT, b"E" * 1000),
        (ERROR, SUCCESS),
    ]
    outcome = _run()
    assert outcome.stdout == b"A" * 1000 + b"B" * 1000 + b"C" * 1000 + b"D" * 1000 + b"E" * 1000
    assert outcome.stderr == b"pid 42\n"
    assert outcome.exit_code == 0
    (ws,) = scripted.opened
    assert "command=cat" in ws.url  # the real request path built the exec URL
    # Nothing copies the stream into the client's unbounded capture buffer.
    assert ws.capture_all is False


def test_the_stdout_cap_still_holds(scripted: type[OneFramePerUpdate]) -> None:
    scripted.script = [(STDOUT, b"x" * 600), (STDOUT, b"y" * 600), (ERROR, SUCCESS)]
    outcome = _run(max_stdout=1000)
    assert outcome.stdout == b"x" * 600 + b"y" * 400
    assert outcome.stdout_overflow
