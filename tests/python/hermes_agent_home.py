"""Makes a hermes-agent home with the real hermes-agent package (PyPI,
pinned in .ci/run): its own config code writes config.yaml and .env, its
own agent loop, driven by the tests' fake provider at BASE_URL, writes the
sessions into state.db and calls its memory and skill tools, which write
the memories and a skill. The Rust tests (cli/tests/cli/foreign_home.rs) point
hermes at the result; nothing here imitates hermes-agent's files by hand.

Usage: python hermes_agent_home.py HOME BASE_URL
"""

import os
import sys
from pathlib import Path


def main() -> None:
    home = Path(sys.argv[1])
    base_url = sys.argv[2]
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
    # One of its own HERMES_ variables, which this hermes does not know.
    config.save_env_value("HERMES_SPOTIFY_CLIENT_ID", "spotify-client-1")

    # Its own agent loop (AIAgent.run_conversation) against the tests' fake
    # provider (hermes_tests::FakeProvider, OpenAI-compatible, on
    # 127.0.0.1): the provider's script has it call its memory tool twice
    # and its skill_manage tool once; the agent stores the conversations in
    # state.db through its SessionDB as it always does.
    from run_agent import AIAgent

    db = SessionDB()

    def converse(message, **where):
        agent = AIAgent(
            base_url=base_url,
            api_key="sk-fake-provider",
            provider="custom",
            model="scripted-model",
            enabled_toolsets=["memory", "skills"],
            quiet_mode=True,
            session_db=db,
            max_iterations=8,
            tool_delay=0,
            **where,
        )
        result = agent.run_conversation(message)
        assert result.get("final_response"), result
        return agent.session_id

    cli = converse(
        "Which gear climbs a hill best? My bicycle has 11 gears; I like short answers.",
        platform="cli",
    )
    db.set_session_title(cli, "Bicycle gears")
    converse(
        "Remind me what a derailleur does",
        platform="telegram",
        user_id="4242",
        chat_id="4242",
        chat_type="dm",
    )
    db.close()
    print(home)


if __name__ == "__main__":
    main()
