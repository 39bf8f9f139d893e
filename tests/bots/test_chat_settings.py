"""Per-chat settings (issue 18, Deliver 5): a chat's model among the bot's allowed models and an
extra system instruction, changed with PATCH /api/v1/sessions/{id}/ without editing the bot."""

import pytest
from django.conf import settings

from bots.models import Bot, ChatSession
from chat_platform.llm.tokens import count_message_tokens
from compaction.pipeline import context_report
from tests.factories import BotFactory, SessionFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)

OTHER = "openai/gpt-4o-mini"  # litellm's local model map: max_input_tokens 128000


@pytest.fixture
def multi_session(owner, fake_openai, monkeypatch):
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        allowed_models=[OTHER],
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        models_approved=f"openai/fake-model\n{OTHER}",
    )
    return SessionFactory(user=owner, bot=bot)


def _patch(client, session, body):
    return client.patch(f"/api/v1/sessions/{session.pk}/", body, format="json")


def test_provider_request_carries_instruction_after_prompt_and_the_chosen_model(
    owner_client, multi_session, fake_openai, eager_tasks
):
    response = _patch(
        owner_client, multi_session, {"model": OTHER, "extra_instruction": "  Answer in French. "}
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["model_override"], body["extra_instruction"]) == (OTHER, "Answer in French.")
    fake_openai.script(Reply(text="Bonjour."))
    sent = owner_client.post(
        f"/api/v1/sessions/{multi_session.pk}/messages/",
        {"content": "hello", "wait": True},
        format="json",
    )
    assert sent.status_code == 201
    request = fake_openai.requests[0]
    assert request["model"] == "gpt-4o-mini"
    assert request["messages"] == [
        {"role": "system", "content": "You are a test bot."},
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "hello"},
    ]
    reply = sent.json()["assistant_message"]
    assert reply["content"] == "Bonjour."
    bot = Bot.objects.get(pk=multi_session.bot_id)  # the bot itself is unchanged
    assert (bot.model, bot.system_prompt) == ("openai/fake-model", "You are a test bot.")


def test_instruction_counted_in_system_part_and_model_sets_budget(owner_client, multi_session):
    session = ChatSession.objects.select_related("bot").get(pk=multi_session.pk)
    before = context_report(session=session)
    cap = settings.CONTEXT_ABSOLUTE_CAP_TOKENS
    # fake-model is unknown to litellm: W = the cap; B = W - R
    assert (before["window"], before["budget"]) == (cap, min(cap - 1024, cap))
    prompt = count_message_tokens("You are a test bot.", model="openai/fake-model")
    assert before["parts"]["system"] == prompt

    assert (
        _patch(
            owner_client, session, {"model": OTHER, "extra_instruction": "Be brief."}
        ).status_code
        == 200
    )
    session = ChatSession.objects.select_related("bot").get(pk=multi_session.pk)
    after = context_report(session=session)
    assert (after["window"], after["budget"]) == (128000, 128000 - 1024)
    assert after["parts"]["system"] == count_message_tokens(
        "You are a test bot.", model=OTHER
    ) + count_message_tokens("Be brief.", model=OTHER)
    assert (after["hard"], after["soft"]) == (126976 * 75 // 100, 126976 * 50 // 100)

    # back to the bot's model: "" and the bot's own name mean the same
    assert _patch(owner_client, session, {"model": "openai/fake-model"}).json()[
        "model_override"
    ] == ("")


def test_model_not_allowed_is_validation_error_and_changes_nothing(owner_client, multi_session):
    _patch(owner_client, multi_session, {"extra_instruction": "Keep it."})
    response = _patch(
        owner_client, multi_session, {"model": "openai/gpt-4o", "extra_instruction": "New."}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["model"] == [
        f"Not one of this bot's models: choose one of openai/fake-model, {OTHER}."
    ]
    multi_session.refresh_from_db()
    assert (multi_session.model_override, multi_session.extra_instruction) == ("", "Keep it.")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": 5}, "model"),
        ({"extra_instruction": ["x"]}, "extra_instruction"),
        ({"extra_instruction": "a\x00b"}, "extra_instruction"),
        ({"extra_instruction": "x" * 4001}, "extra_instruction"),
        ({}, "title"),
    ],
)
def test_bad_settings_are_refused(owner_client, multi_session, body, field):
    response = _patch(owner_client, multi_session, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert field in response.json()["error"]["details"]
    multi_session.refresh_from_db()
    assert (multi_session.model_override, multi_session.extra_instruction) == ("", "")


def test_instruction_that_leaves_no_room_is_refused(owner_client, owner):
    bot = BotFactory(owner=owner, context_window=400, max_output_tokens=100)
    session = SessionFactory(user=owner, bot=bot)
    response = _patch(owner_client, session, {"extra_instruction": "word " * 300})
    assert response.status_code == 400
    (message,) = response.json()["error"]["details"]["extra_instruction"]
    assert "must stay under 225 (75 % of this chat's budget)" in message
    session.refresh_from_db()
    assert session.extra_instruction == ""


def test_other_users_chat_is_404_and_unchanged(other_client, multi_session):
    response = _patch(other_client, multi_session, {"model": OTHER})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    multi_session.refresh_from_db()
    assert multi_session.model_override == ""


def test_model_the_bot_no_longer_allows_is_never_called(owner_client, multi_session):
    assert _patch(owner_client, multi_session, {"model": OTHER}).status_code == 200
    Bot.objects.filter(pk=multi_session.bot_id).update(allowed_models=[])
    session = ChatSession.objects.select_related("bot").get(pk=multi_session.pk)
    assert session.chat_model == "openai/fake-model"


def test_allowed_models_follow_the_staff_rules(owner_client, staff_client, settings):
    settings.PROVIDER_API_BASES = []
    # a non-staff owner may not list a provider outside USER_PROVIDERS
    response = owner_client.post(
        "/api/v1/bots/",
        {"name": "B", "allowed_models": ["bedrock/anthropic.claude-v2"]},
        format="json",
    )
    assert response.status_code == 400
    assert "allowed_models" in response.json()["error"]["details"]
    assert not Bot.objects.filter(name="B").exists()
    # staff may, and it is approved for calls
    response = staff_client.post(
        "/api/v1/bots/",
        {"name": "S", "allowed_models": ["bedrock/anthropic.claude-v2"]},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["allowed_models"] == ["bedrock/anthropic.claude-v2"]
    bot = Bot.objects.get(name="S")
    assert bot.model_trusted("bedrock/anthropic.claude-v2")


@pytest.mark.parametrize(
    "value",
    ["openai/x", [1], ["a b"], ["openai/x", "openai/x"], [f"openai/m{i}" for i in range(21)]],
)
def test_allowed_models_shape(owner_client, value):
    response = owner_client.post(
        "/api/v1/bots/", {"name": "Shape", "allowed_models": value}, format="json"
    )
    assert response.status_code == 400
    assert "allowed_models" in response.json()["error"]["details"]
    assert not Bot.objects.filter(name="Shape").exists()
