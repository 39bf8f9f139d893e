import pytest


@pytest.fixture
def fast_llm(settings):
    # One attempt per summariser call unless a test says otherwise: request counts stay exact.
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.01


@pytest.fixture
def small_bot(fake_bot):
    """B 2000, S 1000, H 1500, T 800, Ts 800."""
    fake_bot.context_window = 2200
    fake_bot.max_output_tokens = 200
    fake_bot.system_prompt = ""
    fake_bot.memory_index_size = 0  # no index block: pressure is history + summaries exactly
    fake_bot.save()
    return fake_bot
