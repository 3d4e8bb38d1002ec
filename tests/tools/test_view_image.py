"""``view_image``: offered to vision models only; its result and state stay light.

That the image then reaches the model is ViewImageMiddleware's job
(tests/middlewares/test_view_image.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

from runtime.config import load_settings
from tests.support.sandbox_runs import make_settings, run_agent, tool_messages
from tests.support.scripted import ai_text, ai_tools, scripted_model_entry, tool_call, write_config
from tools.view_image import sniff_image_type

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _vision_settings(tmp_path: Path, script: list[dict[str, object]], vision: bool = True):
    return load_settings(
        write_config(tmp_path, models=[scripted_model_entry(script, supports_vision=vision)])
    )


async def test_vision_model_views_the_image(tmp_path: Path) -> None:
    script = [
        ai_tools(tool_call("view_image", image_path="/mnt/user-data/uploads/dot.png")),
        ai_tools(tool_call("view_image", image_path="/mnt/user-data/uploads/notes.txt")),
        ai_tools(tool_call("view_image", image_path="/etc/hostname")),
        ai_text("A single dot."),
    ]
    settings = _vision_settings(tmp_path, script)
    uploads = settings.data_root_path() / "users/alice/threads/img/user-data/uploads"

    def setup() -> None:  # blocking file setup stays off the event loop
        uploads.mkdir(parents=True)
        (uploads / "dot.png").write_bytes(PNG)
        (uploads / "notes.txt").write_text("not an image")

    await asyncio.to_thread(setup)
    result = await run_agent(settings, "look", thread_id="img", user="alice")
    seen, not_image, outside = tool_messages(result)
    assert seen.status == "success" and isinstance(seen.content, str)
    assert "Viewed image /mnt/user-data/uploads/dot.png (image/png" in seen.content
    assert base64.b64encode(PNG).decode() not in seen.content
    assert not_image.status == "error" and "not a PNG" in str(not_image.content)
    assert outside.status == "error" and "outside the sandbox" in str(outside.content)
    assert result["viewed_images"] == {
        "/mnt/user-data/uploads/dot.png": {
            "mime_type": "image/png",
            "size": len(PNG),
            "sha256": hashlib.sha256(PNG).hexdigest(),
        }
    }


async def test_view_image_is_not_offered_to_other_models(tmp_path: Path) -> None:
    script = [ai_tools(tool_call("view_image", image_path="x.png")), ai_text("done")]
    result = await run_agent(make_settings(tmp_path, script), "look")
    (refused,) = tool_messages(result)
    assert refused.status == "error" and "view_image is not a valid tool" in str(refused.content)


def test_sniff_image_type() -> None:
    assert sniff_image_type(PNG) == "image/png"
    assert sniff_image_type(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert sniff_image_type(b"GIF89a....") == "image/gif"
    assert sniff_image_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert sniff_image_type(b"<svg xmlns=...>") is None
    assert sniff_image_type(b"") is None
