""".env.example lists every setting chat_platform/settings/ reads from the environment."""

import re

from tests.integration.processes import ROOT

# env.str("NAME", …), env.bool("NAME"…), env.db("DATABASE_URL", …), env("NAME") …
READ = re.compile(r"""\benv(?:\.\w+)?\(\s*["']([A-Z][A-Z0-9_]*)["']""")
# NAME=value, or a commented-out "# NAME=" line for settings that are off by default.
LISTED = re.compile(r"^\s*#?\s*([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def _read_by_settings() -> set[str]:
    return {
        name
        for path in sorted((ROOT / "chat_platform" / "settings").glob("*.py"))
        for name in READ.findall(path.read_text())
    }


def test_every_setting_read_by_settings_py_is_in_env_example():
    read = _read_by_settings()
    listed = set(LISTED.findall((ROOT / ".env.example").read_text()))
    assert len(read) > 30  # the pattern still finds what the settings read
    assert sorted(read - listed) == []


def test_env_example_lists_nothing_settings_do_not_read_except_provider_keys():
    read = _read_by_settings()
    listed = set(LISTED.findall((ROOT / ".env.example").read_text()))
    # Provider keys are read by the gateway at call time; the offline pair by chat_platform/
    # offline.py at start-up.
    others = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "LITELLM_LOCAL_MODEL_COST_MAP"}
    others |= {"TIKTOKEN_CACHE_DIR"}
    # Read by the launcher, scripts/worker.sh, before any Python starts.
    others |= {"WORKER_PROCESSES"}
    assert sorted(listed - read - others) == []
