"""``present_files`` in real runs: outputs only, artifacts in state, remote storage copied."""

from __future__ import annotations

from pathlib import Path

from tests.support.sandbox_runs import make_settings, run_agent, tool_messages
from tests.support.scripted import ai_text, ai_tools, tool_call

OUT = "/mnt/user-data/outputs"


def write(path: str, content: str = "data") -> dict[str, object]:
    return tool_call("write_file", description="d", path=path, content=content)


async def test_present_only_regular_files_in_outputs(tmp_path: Path) -> None:
    script = [
        ai_tools(write(f"{OUT}/a.md"), write(f"{OUT}/sub/b.csv"), write("draft.md")),
        ai_tools(tool_call("bash", description="d", command=f"ln -s /etc/passwd {OUT}/link")),
        ai_tools(
            tool_call(
                "present_files",
                filepaths=[f"{OUT}/a.md", f"{OUT}/sub/b.csv", "draft.md", f"{OUT}/missing.md"],
            )
        ),
        ai_tools(
            tool_call(
                "present_files",
                filepaths=[f"{OUT}/sub", f"{OUT}/link", "/etc/passwd", f"{OUT}/../x"],
            )
        ),
        ai_tools(tool_call("present_files", filepaths=[f"{OUT}/a.md"])),
        ai_tools(tool_call("present_files", filepaths=[])),
        ai_text("done"),
    ]
    result = await run_agent(make_settings(tmp_path, script), "go")
    mixed, refused, again, empty = tool_messages(result)[4:]
    assert mixed.status == "success"
    assert str(mixed.content).startswith(
        f"Presented to the user:\n- {OUT}/a.md\n- {OUT}/sub/b.csv\nNot presented:\n"
    )
    assert "draft.md: only files in /mnt/user-data/outputs" in str(mixed.content)
    assert "missing.md: not an existing regular file" in str(mixed.content)
    assert refused.status == "error"
    assert str(refused.content).count("\n- ") == 4
    assert again.status == "success"
    assert empty.status == "error" and "filepaths is empty" in str(empty.content)
    assert result["artifacts"] == [f"{OUT}/a.md", f"{OUT}/sub/b.csv"]


async def test_presenting_from_detached_storage_copies_to_the_host(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        [
            ai_tools(write(f"{OUT}/remote.txt", "made in the sandbox")),
            ai_tools(tool_call("present_files", filepaths=[f"{OUT}/remote.txt"])),
            ai_text("done"),
        ],
        sandbox={"use": "tests.support.sandbox_providers:DetachedStorageProvider"},
    )
    result = await run_agent(settings, "go", thread_id="t-remote", user="carol")
    assert result["artifacts"] == [f"{OUT}/remote.txt"]
    host = settings.data_root_path() / "users/carol/threads/t-remote/user-data/outputs/remote.txt"
    assert host.read_text() == "made in the sandbox"
    detached = settings.data_root_path() / "detached-storage/users/carol/threads/t-remote"
    assert (detached / "user-data/outputs/remote.txt").exists()


async def test_internal_tool_output_storage_cannot_be_presented(tmp_path: Path) -> None:
    """Issue 19.7: `.tool-results` is budget storage: never presented (nor downloaded)."""
    internal = f"{OUT}/.tool-results/echo-abc.txt"
    script = [
        ai_tools(write(internal, "secret-ish"), write(f"{OUT}/ok.md")),
        ai_tools(tool_call("present_files", filepaths=[internal, f"{OUT}/ok.md"])),
        ai_text("done"),
    ]
    result = await run_agent(make_settings(tmp_path, script), "go")
    presented = tool_messages(result)[-1]
    assert "internal tool-output storage cannot be presented" in str(presented.content)
    assert result["artifacts"] == [f"{OUT}/ok.md"]
