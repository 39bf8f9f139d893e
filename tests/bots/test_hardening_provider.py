"""Hardening II, defects 1-4 and 7: what a signed-in user's bot can reach, and what comes back.

1. a call carries exactly the key its bot names, never the server's ``OPENAI_API_KEY``; every
   configured secret is redacted from errors, stored replies and log lines;
2. no road follows a redirect (Check model, /compact, chat on litellm's and the direct road);
3. a provider prefix never bypasses ``PROVIDER_API_BASES``;
4. un-sharing a bot revokes it on the next send, turn and compaction;
7. NUL and lone surrogates from a provider end the reply at once.
"""

import logging

import pytest

from bots.models import Bot, Message
from chat_platform import outbound
from chat_platform.llm import gateway
from chat_platform.llm.gateway import request
from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import FakeOpenAI, Reply
from turns.turn import turn_run

OPERATOR_KEY = "sk-operator-OWN-key-0123456789"
INTERNAL_SECRET = "INTERNAL-METADATA-SECRET"


@pytest.fixture
def internal():
    """A listener on another loopback port standing in for an internal address (a metadata
    service): it answers with a secret, and must never be asked anything."""
    with FakeOpenAI(default=Reply(text=INTERNAL_SECRET)) as server:
        yield server


@pytest.fixture
def operator_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_KEY)
    return OPERATOR_KEY


def _user_bot(client, **fields) -> Bot:
    response = client.post("/api/v1/bots/", {"name": "mine", **fields}, format="json")
    assert response.status_code == 201, response.json()
    return Bot.objects.get(pk=response.json()["id"])


def _send(client, session, content="hello"):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": content, "wait": True},
        format="json",
    )


def _session_for(client, bot) -> int:
    response = client.post("/api/v1/sessions/", {"bot": bot.pk}, format="json")
    assert response.status_code == 201
    return response.json()["id"]


class _Session:
    def __init__(self, pk):
        self.pk = pk


# --- 1. keys ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("model", "direct"),
    [("openai/fake-model", True), ("openai/fake-model", False), ("hosted_vllm/fake-model", True)],
    ids=["openai-direct", "openai-litellm", "hosted_vllm-litellm"],
)
def test_a_user_bot_naming_no_key_never_sends_the_operators_key(
    owner_client, fake_openai, operator_key, eager_tasks, settings, model, direct
):
    settings.PROVIDER_API_BASES = [fake_openai.url]
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = direct
    bot = _user_bot(owner_client, model=model, api_base=fake_openai.url, api_key_env="")
    fake_openai.script(Reply(text="hi", echo_authorization=True))

    response = _send(owner_client, _Session(_session_for(owner_client, bot)))

    assert response.status_code == 201
    assert fake_openai.headers[0]["authorization"] == "Bearer no-key-required"
    assert response.json()["assistant_message"]["content"] == (
        "hi [you sent: Bearer no-key-required]"
    )
    assert OPERATOR_KEY not in str(Message.objects.values_list("content", "error_message"))


@pytest.mark.django_db(transaction=True)
def test_a_key_echoed_by_the_provider_is_redacted_from_the_error_the_row_and_the_log(
    owner, owner_client, fake_openai, eager_tasks, monkeypatch, caplog
):
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner, model="openai/fake-model", api_base=fake_openai.url, api_key_env=FAKE_KEY_ENV
    )
    session = SessionFactory(user=owner, bot=bot)
    fake_openai.script(Reply(status=400, error_message="bad request", echo_authorization=True))

    with caplog.at_level(logging.WARNING):
        response = _send(owner_client, session)

    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert message == (
        "The model did not answer: openai/fake-model: request rejected (HTTP 400) "
        "(bad request [you sent: Bearer ***])"
    )
    reply = Message.objects.get(session=session, role="assistant")
    assert reply.error_message == message
    assert fake_openai.headers[0]["authorization"] == f"Bearer {FAKE_KEY}"
    assert FAKE_KEY not in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_key_echoed_in_a_streamed_reply_is_redacted_even_split_across_deltas(
    owner, owner_client, fake_openai, eager_tasks, monkeypatch
):
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner, model="openai/fake-model", api_base=fake_openai.url, api_key_env=FAKE_KEY_ENV
    )
    session = SessionFactory(user=owner, bot=bot)
    text = f"the key is {FAKE_KEY}, bye"
    fake_openai.script(Reply(text=text, chunks=[text[:14], text[14:20], text[20:]]))

    response = _send(owner_client, session)

    assert response.status_code == 201
    assert response.json()["assistant_message"]["content"] == "the key is ***, bye"
    assert Message.objects.get(session=session, role="assistant").content == "the key is ***, bye"


def test_the_log_formatter_redacts_every_configured_secret(monkeypatch):
    from chat_platform.log_config import _redact_line

    monkeypatch.setenv("SOME_VENDOR_TOKEN", "tok-0123456789abcdef")
    monkeypatch.setenv("CACHE_URL", "redis://user:p4ssw0rd-long@cache:6379/0")
    line = '{"event": "x", "detail": "tok-0123456789abcdef and p4ssw0rd-long", "n": "short"}'
    assert _redact_line(None, "info", line) == (
        '{"event": "x", "detail": "*** and ***", "n": "short"}'
    )


# --- 2. redirects ---------------------------------------------------------------------------------


@pytest.fixture
def redirecting_bot(owner, owner_client, fake_openai, internal, settings):
    """A non-staff user's bot on a listed base that answers 307 to the internal listener."""
    settings.PROVIDER_API_BASES = [fake_openai.url]
    bot = _user_bot(
        owner_client, model="openai/fake-model", api_base=fake_openai.url, api_key_env=""
    )
    fake_openai.default = Reply(redirect_to=internal.url + "/chat/completions")
    return bot


def _internal_untouched(internal):
    assert internal.requests == []
    assert internal.served == []


@pytest.mark.django_db
def test_check_model_does_not_follow_a_redirect_to_an_internal_address(
    owner, redirecting_bot, internal, fake_openai
):
    from django.test import Client

    client = Client()
    client.force_login(owner)
    response = client.post(f"/bots/{redirecting_bot.pk}/check/")

    body = response.json()
    assert (body["ok"], body["reply"]) == (False, "")
    # Where the redirect pointed is the server's to know, never the user's (docs/security.md).
    assert body["error"] == (
        "openai/fake-model: the provider answered with a redirect (HTTP 307), not followed"
    )
    assert internal.url not in response.content.decode()
    assert len(fake_openai.served) == 1
    _internal_untouched(internal)


@pytest.mark.django_db(transaction=True)
def test_compact_does_not_post_the_transcript_to_a_redirect(
    owner, owner_client, redirecting_bot, internal, fake_openai
):
    session = SessionFactory(user=owner, bot=redirecting_bot)
    for i in range(1, 13):
        message_add(
            session,
            role="user" if i % 2 else "assistant",
            content=f"message {i} about the harbour and its {i} boats " * 12,
        )

    response = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")

    assert response.status_code == 200
    assert response.json()["outcome"] in ("failed", "compacted")  # extractive may step in
    assert len(fake_openai.served) >= 1
    assert all(s.path.endswith("/chat/completions") for s in fake_openai.served)
    _internal_untouched(internal)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("model", "direct"),
    [("openai/fake-model", True), ("openai/fake-model", False), ("hosted_vllm/fake-model", True)],
    ids=["openai-direct", "openai-litellm", "hosted_vllm-litellm"],
)
def test_chat_does_not_follow_a_redirect_on_any_road(
    owner_client, fake_openai, internal, eager_tasks, settings, model, direct
):
    settings.PROVIDER_API_BASES = [fake_openai.url]
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = direct
    bot = _user_bot(owner_client, model=model, api_base=fake_openai.url, api_key_env="")
    fake_openai.default = Reply(redirect_to=internal.url + "/chat/completions")

    response = _send(owner_client, _Session(_session_for(owner_client, bot)))

    assert response.status_code == 502
    assert response.json()["error"]["message"] == (
        f"The model did not answer: {model}: the provider answered with a redirect (HTTP 307), "
        "not followed"
    )
    assert internal.url not in response.content.decode()
    assert len(fake_openai.served) == 1  # refused at once: a redirect is not retried
    _internal_untouched(internal)


def test_inside_a_call_only_the_approved_endpoint_may_be_reached_at_a_private_address(
    fake_openai, internal
):
    import httpx

    policy = outbound.policy_for(approved_bases=[fake_openai.url])
    with httpx.Client() as client, outbound.scope(policy):
        ok = client.get(fake_openai.url + "/models")
        with pytest.raises(outbound.OutboundRefused) as refused:
            client.get(internal.url + "/models")
    assert ok.status_code == 200
    assert str(refused.value) == "127.0.0.1 is not an allowed provider address"
    _internal_untouched(internal)
    # outside a call, the platform's (and the tests') other clients are untouched
    with httpx.Client() as client:
        assert client.get(internal.url + "/models").status_code == 200


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("fd00:ec2::254", False),
        ("fe80::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:169.254.169.254", False),
        ("224.0.0.1", False),
        ("not-an-ip", False),
    ],
)
def test_which_addresses_count_as_public(address, public):
    assert outbound.address_is_public(address) is public


# --- 3. provider prefixes -------------------------------------------------------------------------


PROVIDER_NOT_ALLOWED_PREFIX = "Not a provider your bots may use: name one of "
DEFAULT_NOT_LISTED = [
    "This provider's default address is not allowed (PROVIDER_API_BASES): set an allowed "
    "api_base, or ask an administrator."
]


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["ollama/llama3", "ollama_chat/llama3", "openai/gpt-4o-mini"])
def test_a_user_bot_on_a_prefix_default_that_is_not_listed_is_refused(
    owner_client, settings, model
):
    settings.PROVIDER_API_BASES = ["http://llm.internal:8000/v1"]
    response = owner_client.post(
        "/api/v1/bots/", {"name": "x", "model": model, "api_base": ""}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"model": DEFAULT_NOT_LISTED}
    assert Bot.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["bedrock/anthropic.claude-v2", "vertex_ai/gemini-pro", "gpt-4o"])
def test_a_user_bot_naming_a_provider_outside_the_user_list_is_refused(
    owner_client, settings, model
):
    settings.PROVIDER_API_BASES = ["http://llm.internal:8000/v1"]
    response = owner_client.post(
        "/api/v1/bots/",
        {"name": "x", "model": model, "api_base": "http://llm.internal:8000/v1"},
        format="json",
    )
    assert response.status_code == 400
    [error] = response.json()["error"]["details"]["model"]
    assert error.startswith(PROVIDER_NOT_ALLOWED_PREFIX)
    assert Bot.objects.count() == 0


@pytest.mark.django_db
def test_the_compaction_model_is_held_to_the_same_rule(owner_client, settings):
    settings.PROVIDER_API_BASES = []
    response = owner_client.post(
        "/api/v1/bots/",
        {"name": "x", "model": "builtin/recall", "compaction_model": "ollama/llama3"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"compaction_model": DEFAULT_NOT_LISTED}


@pytest.mark.django_db
def test_staff_may_use_any_prefix_and_a_listed_default_is_fine_for_users(
    staff_client, owner_client, settings
):
    settings.PROVIDER_API_BASES = ["http://localhost:11434"]
    staff_bot = _user_bot(staff_client, model="bedrock/anthropic.claude-v2")
    # every model field staff set is approved, the default embedding model among them
    assert staff_bot.models_approved == "bedrock/anthropic.claude-v2\nbuiltin/embed"
    user_bot = _user_bot(owner_client, model="ollama/llama3", api_base="")
    assert user_bot.models_approved == ""


@pytest.mark.django_db(transaction=True)
def test_a_legacy_prefix_bot_is_refused_at_call_time_and_reaches_nothing(
    owner, owner_client, internal, eager_tasks, settings, monkeypatch
):
    """A row saved before the rule (or behind the service's back): ollama/ with no api_base,
    and OLLAMA_API_BASE pointing at the internal listener."""
    settings.PROVIDER_API_BASES = []
    monkeypatch.setenv("OLLAMA_API_BASE", internal.url.removesuffix("/v1"))
    bot = BotFactory(owner=owner, model="ollama/llama3", api_base="", models_approved="")
    session = SessionFactory(user=owner, bot=bot)

    response = _send(owner_client, session)

    assert response.status_code == 502
    assert response.json()["error"]["message"] == (
        "The model did not answer: ollama/llama3: this bot's api_base is not an allowed "
        "provider address"
    )
    _internal_untouched(internal)


def test_a_listed_default_is_passed_explicitly_so_the_environment_cannot_redirect_it(
    internal, settings, monkeypatch
):
    settings.PROVIDER_API_BASES = ["http://localhost:11434"]
    monkeypatch.setenv("OLLAMA_API_BASE", internal.url.removesuffix("/v1"))
    config = gateway.ModelConfig(model="ollama/llama3", max_output_tokens=5, timeout=2)
    kwargs = request.call_kwargs(config, [], tools=None, max_tokens=None, stream=False)
    assert (kwargs["api_base"], kwargs["api_key"]) == ("http://localhost:11434", "no-key-required")
    with pytest.raises(gateway.ModelCallFailed):
        gateway.complete(config, [{"role": "user", "content": "hi"}])
    _internal_untouched(internal)


# --- 4. un-sharing revokes ------------------------------------------------------------------------


@pytest.fixture
def shared_bot(owner, fake_openai, monkeypatch):
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    return BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        is_shared=True,
        system_prompt="the owner's private prompt",
    )


UNAVAILABLE = {
    "error": {
        "code": "not_found",
        "message": "This chat's bot is no longer available to you.",
        "details": {},
    }
}


@pytest.mark.django_db(transaction=True)
def test_after_unsharing_a_send_is_refused_and_runs_nothing(
    other_user, other_client, shared_bot, fake_openai, eager_tasks
):
    session = SessionFactory(user=other_user, bot=shared_bot)
    assert _send(other_client, session, "while shared").status_code == 201
    served = len(fake_openai.served)
    Bot.objects.filter(pk=shared_bot.pk).update(is_shared=False)
    before = Message.objects.filter(session=session).count()

    response = _send(other_client, session, "after")

    assert (response.status_code, response.json()) == (404, UNAVAILABLE)
    assert Message.objects.filter(session=session).count() == before
    assert len(fake_openai.served) == served
    # the transcript stays readable to its user
    listed = other_client.get(f"/api/v1/sessions/{session.pk}/messages/")
    assert listed.status_code == 200
    assert [m["content"] for m in listed.json()][:1] == ["while shared"]
    # and manual compaction (the owner's model) is refused the same way
    compact = other_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")
    assert (compact.status_code, compact.json()) == (404, UNAVAILABLE)


@pytest.mark.django_db
def test_a_turn_queued_before_unsharing_fails_without_calling_the_model(
    other_user, shared_bot, fake_openai
):
    session = SessionFactory(user=other_user, bot=shared_bot)
    message_add(session, role="user", content="queued while shared")
    reply = message_add(session, role="assistant", content="", status=Message.Status.PENDING)
    Bot.objects.filter(pk=shared_bot.pk).update(is_shared=False)

    turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.error_code, reply.error_message) == (
        "failed",
        "not_found",
        "This chat's bot is no longer available to you.",
    )
    assert fake_openai.served == []


# --- 7. NUL and lone surrogates from the provider -------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "litellm"])
def test_nul_and_lone_surrogates_in_provider_text_end_the_reply_complete_at_once(
    owner_client, fake_session, fake_openai, eager_tasks, settings, direct
):
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = direct
    fake_openai.script(Reply(text="a\x00b\ud800c\udfffd", chunks=["a\x00", "b\ud800c", "\udfffd"]))

    response = _send(owner_client, fake_session)

    assert response.status_code == 201
    reply = response.json()["assistant_message"]
    assert (reply["status"], reply["content"]) == ("complete", "ab\ufffdc\ufffdd")
    assert Message.objects.get(pk=reply["id"]).content == "ab\ufffdc\ufffdd"


# --- 9 (the provider's part). a reply far past max_output_tokens ----------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "litellm"])
def test_a_reply_far_past_max_output_tokens_is_cut_and_marked_length(
    owner, owner_client, fake_openai, eager_tasks, monkeypatch, settings, direct
):
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = direct
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        max_output_tokens=512,
    )
    session = SessionFactory(user=owner, bot=bot)
    huge = "word " * 400_000  # 2 MB, ~400k tokens
    fake_openai.script(
        Reply(text=huge, chunks=[huge[i : i + 20_000] for i in range(0, len(huge), 20_000)])
    )

    response = _send(owner_client, session)

    assert response.status_code == 201
    reply = Message.objects.get(pk=response.json()["assistant_message"]["id"])
    assert (reply.status, reply.finish_reason) == ("complete", "length")
    # cut at (512 + 64) tokens x 16 characters at most
    assert len(reply.content) == 576 * 16
    assert reply.content == huge[: 576 * 16]


def test_a_non_streamed_answer_far_past_its_cap_is_kept_only_to_a_bounded_length(fake_openai):
    """complete() (compaction, Check model) has read the answer whole already: what is kept and
    stored is bounded (256 KiB at least, 16 characters a token of the cap plus margin)."""
    huge = "word " * 200_000  # 1 MB
    fake_openai.script(Reply(text=huge))
    config = gateway.ModelConfig(
        model="openai/fake-model", api_base=fake_openai.url, api_base_trusted=True
    )

    completion = gateway.complete(config, [{"role": "user", "content": "hi"}], max_tokens=512)

    assert (completion.finish_reason, completion.text) == ("length", huge[: 256 * 1024])


def test_the_stream_redactor_holds_only_a_tail_that_could_start_a_secret():
    from chat_platform.redaction import StreamRedactor

    redactor = StreamRedactor(("sk-secret-123",))
    assert redactor.feed("hello ") == "hello "  # nothing held: no secret starts here
    assert redactor.feed("key sk-se") == "key "  # "sk-se" may be a secret's start
    assert redactor.feed("cret-123 ok") == "*** ok"
    assert redactor.feed(" sk") == " "
    assert redactor.feed("ip") == "skip"  # not a secret after all: released
    assert redactor.feed(" s") == " "
    assert redactor.flush() == "s"  # the end of the stream releases what is held
