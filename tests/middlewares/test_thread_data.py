"""ThreadDataMiddleware in real runs: paths, lazy and eager directories, run stamps, identity."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from auth.identity import make_safe_user_id
from tests.support.sandbox_runs import make_settings, run_agent
from tests.support.scripted import ai_text


async def test_thread_paths_in_state_and_lazy_directories(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("hi")])
    result = await run_agent(settings, "hello", thread_id="t-lazy", user="alice")
    base = settings.data_root_path() / "users/alice/threads/t-lazy/user-data"
    assert result["thread_data"] == {
        "user_id": "alice",
        "thread_id": "t-lazy",
        "workspace_path": str(base / "workspace"),
        "uploads_path": str(base / "uploads"),
        "outputs_path": str(base / "outputs"),
    }
    assert not base.exists(), "lazy by default: nothing is created before it is needed"


async def test_eager_directories(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("hi")], sandbox={"thread_dirs_lazy_init": False})
    await run_agent(settings, "hello", thread_id="t-eager", user="alice")
    base = settings.data_root_path() / "users/alice/threads/t-eager/user-data"
    assert sorted(p.name for p in base.iterdir()) == ["outputs", "uploads", "workspace"]


async def test_identity_is_made_safe(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("hi")])
    raw = "../../Eve <eve@example.com>"
    result = await run_agent(settings, "hello", thread_id="t1", user=raw)
    safe = make_safe_user_id(raw)
    assert result["thread_data"]["user_id"] == safe
    assert "/" not in safe and ".." not in safe
    assert result["thread_data"]["workspace_path"].startswith(
        str(settings.data_root_path() / "users" / safe / "threads")
    )


async def test_run_id_and_timestamp_are_stamped_once_per_user_message(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("first"), ai_text("second")])
    saver = InMemorySaver()
    first = await run_agent(
        settings, "one", checkpointer=saver, run_id="11111111-aaaa-4aaa-8aaa-111111111111"
    )
    stamp = first["messages"][0].additional_kwargs
    assert stamp["run_id"] == "11111111-aaaa-4aaa-8aaa-111111111111"
    assert stamp["timestamp"].endswith("+00:00")
    second = await run_agent(
        settings,
        {"messages": [HumanMessage("two", response_metadata={"source": "test"})]},
        checkpointer=saver,
        run_id="22222222-bbbb-4bbb-8bbb-222222222222",
    )
    humans = [m for m in second["messages"] if isinstance(m, HumanMessage)]
    assert humans[0].additional_kwargs == stamp, "an earlier turn keeps its stamp"
    assert humans[1].additional_kwargs["run_id"] == "22222222-bbbb-4bbb-8bbb-222222222222"
    assert humans[1].response_metadata == {"source": "test"}
    assert humans[1].content == "two"


async def test_hidden_messages_are_not_stamped_and_no_thread_is_tolerated(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("hi")])
    result = await run_agent(
        settings,
        {
            "messages": [
                HumanMessage("real question"),
                HumanMessage(
                    "<system-reminder>x</system-reminder>", additional_kwargs={"hide_from_ui": True}
                ),
            ]
        },
        thread_id=None,
    )
    real, hidden = result["messages"][:2]
    assert "timestamp" in real.additional_kwargs
    assert hidden.additional_kwargs == {"hide_from_ui": True}
    assert result.get("thread_data") is None
    assert result["messages"][-1].content == "hi"
