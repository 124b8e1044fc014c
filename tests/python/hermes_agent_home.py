"""Makes a hermes-agent home with the real hermes-agent package (PyPI,
pinned in .ci/run): its own SessionDB writes state.db, its own config code
writes config.yaml, its memory and skill tools (the functions its agent
calls) write the memories and a skill. The Rust tests (cli/tests/cli/foreign_home.rs) point
hermes at the result; nothing here imitates hermes-agent's files by hand.

Usage: python hermes_agent_home.py HOME
"""

import json
import os
import sys
from pathlib import Path


def main() -> None:
    home = Path(sys.argv[1])
    home.mkdir(parents=True, exist_ok=True)
    # hermes-agent resolves its home from HERMES_HOME at import time.
    os.environ["HERMES_HOME"] = str(home)

    from hermes_cli import config
    from hermes_state import SessionDB

    config.ensure_hermes_home()
    settings = config.load_config()
    # A tuned configuration, through its own config code (save_config keeps
    # only what differs from its defaults): a custom endpoint, a fallback,
    # a narrower toolset list, a turn budget, a Discord setting, and keys
    # with no equivalent in the Rust hermes (display.skin, tts.provider).
    settings["model"] = {
        "default": "scripted-model",
        "provider": "custom",
        "base_url": "http://127.0.0.1:9/v1",
        # A custom endpoint's key, which it keeps in config.yaml.
        "api_key": "sk-custom-endpoint-key-42",
    }
    settings["fallback_providers"] = [
        {"provider": "openrouter", "model": "openai/gpt-4o-mini"},
    ]
    settings["toolsets"] = ["file", "terminal", "memory", "session_search", "delegation", "browser"]
    settings["agent"]["max_turns"] = 40
    settings["discord"]["require_mention"] = False
    settings["display"]["skin"] = "ares"
    settings["tts"]["provider"] = "openai"
    config.save_config(settings)
    # Its key, where its setup writes keys (.env, mode 0600).
    config.save_env_value("OPENROUTER_API_KEY", "sk-or-imported-0123456789")

    db = SessionDB(home / "state.db")
    db.create_session("20260101_090000_cli1", "cli", model="scripted-model")
    db.set_session_title("20260101_090000_cli1", "Bicycle gears")
    db.append_message("20260101_090000_cli1", "user", content="Which gear climbs a hill best?")
    # A tool call and its result, as its agent loop stores them.
    db.append_message(
        "20260101_090000_cli1",
        "assistant",
        content=None,
        tool_calls=[
            {
                "id": "call_gear1",
                "type": "function",
                "function": {"name": "web_search", "arguments": '{"query": "gear ratio hill"}'},
            }
        ],
    )
    db.append_message(
        "20260101_090000_cli1",
        "tool",
        content="Gear ratio is chainring teeth over sprocket teeth.",
        tool_call_id="call_gear1",
        tool_name="web_search",
    )
    db.append_message(
        "20260101_090000_cli1",
        "assistant",
        content="The lowest gear: the smallest chainring with the largest sprocket.",
    )
    db.create_session(
        "20260102_100000_tg1",
        "telegram",
        user_id="4242",
        chat_id="4242",
        chat_type="dm",
        model="scripted-model",
    )
    db.append_message("20260102_100000_tg1", "user", content="Remind me what a derailleur does")
    db.close()

    # Its own memory and skill tools (what its agent calls) write the
    # memories and the skill.
    from tools.memory_tool import MemoryStore, memory_tool
    from tools.skill_manager_tool import skill_manage

    memory = MemoryStore()
    memory.load_from_disk()
    for target, content in [
        ("memory", "The user's bicycle has 11 gears."),
        ("user", "Prefers short answers."),
    ]:
        result = json.loads(memory_tool(action="add", target=target, content=content, store=memory))
        assert result.get("success"), result
    skill = (
        "---\nname: tyre-pressure\ndescription: Check and set bicycle tyre pressure.\n---\n\n"
        "# Tyre pressure\n\n1. Read the range on the tyre wall.\n2. Pump to the middle of it.\n"
    )
    result = json.loads(skill_manage(action="create", name="tyre-pressure", content=skill))
    assert result.get("success"), result
    print(home)


if __name__ == "__main__":
    main()
