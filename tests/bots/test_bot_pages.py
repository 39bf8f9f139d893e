"""The bot pages (/bots/, /bots/new/, /bots/<id>/, delete, Check model) through Django's client.

The forms save through turns.services, so each refusal here is the API's refusal: asserted with
its message on the page, a 400, and nothing written.
"""

import re

import pytest
from django.test import Client

from bots.models import Bot
from tests.conftest import FAKE_KEY_ENV
from tests.factories import BotFactory, UserFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db

VALID = {
    "name": "Planner",
    "system_prompt": "You plan trips.",
    "model": "builtin/recall",
    "api_base": "",
    "api_key_env": "",
    "temperature": "0.5",
    "max_output_tokens": "512",
    "context_window": "8000",
    "is_shared": "",
    "compaction_enabled": "on",
    "compaction_threshold": "3000",
    "compaction_kept_percent": "30",
    "compaction_model": "builtin/extractive",
    "compaction_fallback_extractive": "on",
    "memory_index_size": "12",
    "recall_enabled": "on",
}


def post_data(**overrides: str) -> dict[str, str]:
    data = {**VALID, **overrides}
    # An unchecked checkbox is absent from a real form post.
    return {key: value for key, value in data.items() if value != "" or key in ("api_base",)}


@pytest.fixture
def owner_web(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def other_web(other_user) -> Client:
    client = Client()
    client.force_login(other_user)
    return client


@pytest.fixture
def staff_web(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def field_errors(response, name: str) -> list[str]:
    return list(response.context["form"].errors.get(name, []))


# --- access -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/bots/", "/bots/new/", "/bots/1/", "/bots/1/delete/"])
def test_pages_require_sign_in(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_list_shows_own_and_shared_bots_with_edit_links_only_where_editable(
    owner_web, owner, other_user
):
    mine = BotFactory(owner=owner, name="Mine")
    shared = BotFactory(owner=other_user, name="Theirs shared", is_shared=True)
    private = BotFactory(owner=other_user, name="Theirs private")

    response = owner_web.get("/bots/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "Mine" in html and "Theirs shared" in html
    assert "Theirs private" not in html
    assert f'href="/bots/{mine.pk}/delete/"' in html
    assert f'href="/bots/{shared.pk}/delete/"' not in html
    assert f"/bots/{private.pk}/" not in html
    assert [row["editable"] for row in response.context["rows"]] == [True, False]


def test_the_list_and_the_bot_page_show_each_bots_handle(owner_web, owner, other_user):
    """The slug is a bot's @handle in rooms and its /v1 model id: the pages showed it nowhere."""
    mine = BotFactory(owner=owner, name="Mine", slug="my-writer")
    shared = BotFactory(owner=other_user, name="Theirs", slug="their-aide", is_shared=True)

    listed = owner_web.get("/bots/").content.decode()
    handles = re.findall(r'<tr data-bot-id="(\d+)">.*?data-bot-slug>([^<]*)<', listed, re.S)
    assert sorted(handles) == sorted(
        [(str(mine.pk), "@my-writer"), (str(shared.pk), "@their-aide")]
    )
    for bot, slug in ((mine, "my-writer"), (shared, "their-aide")):
        page = owner_web.get(f"/bots/{bot.pk}/").content.decode()
        (note,) = re.findall(r"<p class=\"bots-note\" data-bot-slug>(.*?)</p>", page, re.S)
        assert note == (
            f"Handle <code>@{slug}</code>: how a room mentions it, and its model id on "
            "<code>/v1</code>."
        )


# --- create -------------------------------------------------------------------------------------


def test_new_page_shows_advanced_section_and_server_side_thresholds(owner_web):
    response = owner_web.get("/bots/new/")

    assert response.status_code == 200
    html = response.content.decode()
    assert '<details class="bot-section bot-advanced" id="advanced">' in html
    assert "0 = automatic" in html
    # Defaults: builtin/recall (window unknown -> cap 200000), reserve 1024, kept 40 (§5).
    budget = response.context["budget"]
    assert (budget.window, budget.budget, budget.soft, budget.hard, budget.target) == (
        200_000,
        198_976,
        99_488,
        149_232,
        79_590,
    )
    assert 'id="budget-soft" data-value="99488">99,488<' in html
    # Only allow-listed key variables can be picked.
    options = response.context["form"].fields["api_key_env"].choices
    assert [value for value, _ in options][:3] == ["", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"]


def test_create_with_compaction_settings_saves_every_field(owner_web, owner):
    response = owner_web.post("/bots/new/", post_data())

    bot = Bot.objects.get(owner=owner)
    assert response.status_code == 302
    assert response["Location"] == f"/bots/{bot.pk}/"
    assert (bot.name, bot.model, bot.temperature, bot.max_output_tokens, bot.context_window) == (
        "Planner",
        "builtin/recall",
        0.5,
        512,
        8000,
    )
    assert (
        bot.compaction_enabled,
        bot.compaction_threshold,
        bot.compaction_kept_percent,
        bot.compaction_model,
        bot.compaction_fallback_extractive,
        bot.memory_index_size,
        bot.recall_enabled,
        bot.is_shared,
    ) == (True, 3000, 30, "builtin/extractive", True, 12, True, False)

    page = owner_web.get(response["Location"])
    assert page.status_code == 200
    budget = page.context["budget"]
    # W 8000, R 512: B 7488, H 5616, S min(3000, H) 3000, T 7488*30//100 = 2246.
    assert (budget.budget, budget.soft, budget.hard, budget.target) == (7488, 3000, 5616, 2246)
    assert "Saved" not in page.content.decode()
    assert "created" in page.content.decode()


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"temperature": "3"}, "temperature", "less than or equal to 2"),
        ({"compaction_kept_percent": "0"}, "compaction_kept_percent", "greater than or equal to 1"),
        ({"memory_index_size": "201"}, "memory_index_size", "less than or equal to 200"),
        ({"name": ""}, "name", "This field is required."),
        ({"name": "bad\x00name"}, "name", "Null characters are not allowed."),
        # The service's budget rule (B <= 0), worded as the API words it.
        (
            {"context_window": "1000", "max_output_tokens": "1000"},
            "max_output_tokens",
            "max_output_tokens (1,000) must be smaller than the context window (1,000 tokens)",
        ),
        ({"api_key_env": "SECRET_KEY"}, "api_key_env", "Select a valid choice."),
    ],
)
def test_invalid_input_is_shown_inline_and_nothing_is_saved(
    owner_web, owner, overrides, field, message
):
    response = owner_web.post("/bots/new/", post_data(**overrides))

    assert response.status_code == 400
    errors = field_errors(response, field)
    assert any(message in error for error in errors), errors
    html = response.content.decode()
    assert 'id="form-errors-summary"' in html
    assert f'data-field="{field}"' in html
    assert "field-invalid" in html
    assert not Bot.objects.filter(owner=owner).exists()


def test_advanced_opens_by_itself_when_its_fields_have_errors(owner_web):
    response = owner_web.post("/bots/new/", post_data(compaction_kept_percent="100"))
    assert response.status_code == 400
    assert '<details class="bot-section bot-advanced" id="advanced" open>' in (
        response.content.decode()
    )


def test_non_staff_cannot_set_an_unlisted_api_base_through_the_page(owner_web, owner, settings):
    settings.PROVIDER_API_BASES = ["http://llm.internal:8080/v1"]
    response = owner_web.post(
        "/bots/new/", post_data(api_base="http://169.254.169.254/latest/", model="openai/x")
    )

    assert response.status_code == 400
    assert field_errors(response, "api_base") == [
        "Not an allowed provider address (PROVIDER_API_BASES): ask an administrator."
    ]
    assert not Bot.objects.filter(owner=owner).exists()

    listed = owner_web.post("/bots/new/", post_data(api_base="http://llm.internal:8080/v1/"))
    assert listed.status_code == 302
    bot = Bot.objects.get(owner=owner)
    assert (bot.api_base, bot.api_base_approved) == ("http://llm.internal:8080/v1/", "")


def test_non_staff_edit_cannot_point_a_bot_at_an_unlisted_address(owner_web, bot):
    response = owner_web.post(f"/bots/{bot.pk}/", post_data(api_base="http://10.0.0.5:11434"))

    assert response.status_code == 400
    assert "Not an allowed provider address" in field_errors(response, "api_base")[0]
    bot.refresh_from_db()
    assert (bot.api_base, bot.api_base_approved, bot.name) == ("", "", bot.name)


def test_staff_may_set_any_http_api_base_and_it_is_approved(staff_web, staff):
    response = staff_web.post("/bots/new/", post_data(api_base="http://10.0.0.5:11434"))

    assert response.status_code == 302
    bot = Bot.objects.get(owner=staff)
    assert (bot.api_base, bot.api_base_approved) == ("http://10.0.0.5:11434", bot.api_base)


# --- edit ----------------------------------------------------------------------------------------


def test_edit_shows_the_saved_values_and_updates_them(owner_web, bot):
    page = owner_web.get(f"/bots/{bot.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'value="{bot.name}"' in html
    assert 'id="check-model"' in html

    response = owner_web.post(
        f"/bots/{bot.pk}/", post_data(name="Renamed", compaction_threshold="0", context_window="0")
    )

    assert response.status_code == 302
    assert response["Location"] == f"/bots/{bot.pk}/"
    bot.refresh_from_db()
    assert (bot.name, bot.compaction_threshold, bot.compaction_kept_percent) == ("Renamed", 0, 30)
    assert (bot.compaction_enabled, bot.recall_enabled) == (True, True)

    unchecked = post_data(name="Renamed")
    del unchecked["compaction_enabled"], unchecked["recall_enabled"]
    assert owner_web.post(f"/bots/{bot.pk}/", unchecked).status_code == 302
    bot.refresh_from_db()
    assert (bot.compaction_enabled, bot.recall_enabled) == (False, False)


def test_refused_edit_changes_nothing(owner_web, bot):
    before = Bot.objects.values().get(pk=bot.pk)
    response = owner_web.post(
        f"/bots/{bot.pk}/", post_data(name="Renamed", temperature="-1", memory_index_size="5")
    )
    assert response.status_code == 400
    assert Bot.objects.values().get(pk=bot.pk) == before


def test_another_users_private_bot_is_404_for_every_page(other_web, bot):
    before = Bot.objects.values().get(pk=bot.pk)
    assert other_web.get(f"/bots/{bot.pk}/").status_code == 404
    assert other_web.post(f"/bots/{bot.pk}/", post_data(name="Hijacked")).status_code == 404
    assert other_web.get(f"/bots/{bot.pk}/delete/").status_code == 404
    assert other_web.post(f"/bots/{bot.pk}/delete/").status_code == 404
    assert other_web.get("/bots/999999/").status_code == 404
    assert Bot.objects.values().get(pk=bot.pk) == before


def test_a_shared_bot_is_read_only_for_other_users(other_web, owner):
    shared = BotFactory(
        owner=owner,
        is_shared=True,
        api_base="http://secret.internal:9000/v1",
        api_key_env="OPENAI_API_KEY",
    )
    before = Bot.objects.values().get(pk=shared.pk)

    page = other_web.get(f"/bots/{shared.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="read-only-note"' in html
    assert "secret.internal" not in html and "OPENAI_API_KEY" not in html
    assert 'id="save-bot"' not in html and 'id="check-model"' not in html
    assert 'name="name"' in html and "disabled" in html

    assert other_web.post(f"/bots/{shared.pk}/", post_data(name="Hijacked")).status_code == 403
    assert other_web.post(f"/bots/{shared.pk}/delete/").status_code == 403
    assert Bot.objects.values().get(pk=shared.pk) == before


# --- delete --------------------------------------------------------------------------------------


def test_delete_asks_for_confirmation_then_deletes(owner_web, bot):
    confirm = owner_web.get(f"/bots/{bot.pk}/delete/")
    assert confirm.status_code == 200
    assert 'id="confirm-delete"' in confirm.content.decode()
    assert Bot.objects.filter(pk=bot.pk).exists()

    response = owner_web.post(f"/bots/{bot.pk}/delete/")
    assert response.status_code == 302
    assert response["Location"] == "/bots/"
    assert not Bot.objects.filter(pk=bot.pk).exists()


# --- the unknown-model warning ---------------------------------------------------------------


def test_a_model_litellm_does_not_know_gets_a_warning(owner_web, owner):
    # staff: a bare model string names no provider, which only staff may approve
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    response = owner_web.post(
        "/bots/new/",
        # threshold 0: a hand-set 3,000 lies below where compaction lands on the cap's budget
        post_data(model="not a model at all", context_window="0", compaction_threshold="0"),
    )
    assert response.status_code == 302  # any litellm model string is accepted (docs/bots.md)...

    page = owner_web.get(response["Location"])
    html = page.content.decode()
    # ...but the page says what that means for its window.
    assert 'litellm does not know the model "not a model at all"' in page.context["model_warning"]
    assert "falls back to the cap of 200,000 tokens" in html
    assert 'id="model-warning" role="status" hidden' not in html

    known = owner_web.get("/bots/model-info/", {"model": "gpt-4o-mini"}).json()
    assert known["max_input_tokens"] == 128_000 and known["warning"] == ""
    unknown = owner_web.get("/bots/model-info/", {"model": "not a model at all"}).json()
    assert unknown["max_input_tokens"] is None
    assert unknown["warning"].startswith('litellm does not know the model "not a model at all"')
    builtin = owner_web.get("/bots/model-info/", {"model": "builtin/recall"}).json()
    assert builtin["warning"] == ""


def test_a_set_context_window_silences_the_cap_warning(owner_web, owner):
    """Issue 18, defect 4: the warning said the window falls back to the cap "unless you set
    Context window" and stayed after it was set. The page keeps the text for the live form
    (data-text: clearing the window brings it back) but does not show it."""
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    response = owner_web.post(
        "/bots/new/", post_data(model="not a model at all", context_window="8000")
    )
    page = owner_web.get(response["Location"])
    html = page.content.decode()
    assert page.context["model_warning"] == ""
    assert page.context["model_warning_text"].startswith(
        'litellm does not know the model "not a model at all"'
    )
    assert 'id="model-warning" role="status" data-text="litellm does not know' in html
    assert 'data-text="litellm does not know the model &quot;not a model at all&quot;' in html
    assert html.count("falls back to the cap") == 1  # in data-text only, not shown


def test_a_soft_threshold_above_the_hard_one_is_kept_and_explained(owner_web):
    """Issue 18, defect 4: 5000 on a 4096-window bot was saved silently as 2,880. It is kept as
    entered, and the page says what it does."""
    response = owner_web.post(
        "/bots/new/",
        post_data(context_window="4096", max_output_tokens="256", compaction_threshold="5000"),
    )
    assert response.status_code == 302, response.context["form"].errors
    bot = Bot.objects.get(name="Planner")
    assert bot.compaction_threshold == 5000
    page = owner_web.get(response["Location"])
    assert page.context["budget"].hard == 2880
    assert page.context["budget_note"] == (
        "The window is the one set above. A call sends at most the window minus the max output "
        "tokens (never more than the cap). Compacting in the background is set to start at "
        "5,000, above where it compacts before replying (2,880): it will compact before "
        "replying at 2,880 tokens, never in the background. Lower it to compact in the "
        "background first."
    )


def test_a_threshold_below_the_landing_point_is_refused_and_the_note_says_why(owner_web):
    # W 16000, R 512 -> B 15488; kept 30 -> lands at 4,646; + 5 % of B (774) = 5,420.
    response = owner_web.post(
        "/bots/new/", post_data(context_window="16000", compaction_threshold="3000")
    )
    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["compaction_threshold"]
    error = response.context["form"].errors["compaction_threshold"][0]
    assert error.startswith(
        "The threshold must be at least 5,420 tokens: compaction lands at 4,646 tokens "
        "(30 % of this bot's budget of 15,488)"
    )
    assert response.context["budget_note"] == (
        "The window is the one set above. A call sends at most the window minus the max output "
        "tokens (never more than the cap). Compacting in the background at 3,000 is too low: set "
        "it to at least 5,420 tokens (where background compaction lands, 4,646, plus 5 % of what "
        "a call may send, 774), or to 0 (automatic)."
    )
    assert not Bot.objects.filter(name="Planner").exists()


def test_model_info_needs_sign_in(client):
    response = client.get("/bots/model-info/", {"model": "gpt-4o-mini"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


# --- Check model -------------------------------------------------------------------------------


def test_check_model_makes_one_tiny_call_and_reports_the_reply(owner_web, fake_bot, fake_openai):
    fake_openai.script(Reply(text="ok"))

    response = owner_web.post(f"/bots/{fake_bot.pk}/check/")

    assert response.status_code == 200
    data = response.json()
    assert (data["ok"], data["reply"], data["error"]) == (True, "ok", "")
    assert data["model"].endswith("fake-model")
    assert isinstance(data["latency_ms"], int) and data["latency_ms"] >= 0
    [sent] = fake_openai.requests
    assert sent["max_tokens"] == 5
    assert [m["role"] for m in sent["messages"]] == ["user"]
    assert fake_openai.headers[0].get("authorization") == "Bearer sk-test-fake-key"


def test_check_model_reports_the_providers_error_in_plain_words(owner_web, fake_bot, fake_openai):
    fake_openai.script(*[Reply(status=500, error_message="model overloaded")] * 3)

    response = owner_web.post(f"/bots/{fake_bot.pk}/check/")

    assert response.status_code == 200
    data = response.json()
    assert data["ok"] is False and data["reply"] == ""
    assert "500" in data["error"] or "overloaded" in data["error"], data["error"]
    assert "sk-test-fake-key" not in data["error"]
    assert len(fake_openai.requests) == 3  # one call, retried like any transient failure


def test_check_model_uses_the_saved_bot_never_the_request(owner_web, fake_bot, fake_openai):
    fake_openai.script(Reply(text="ok"))
    response = owner_web.post(
        f"/bots/{fake_bot.pk}/check/",
        {"api_base": "http://169.254.169.254/", "model": "openai/other"},
    )
    assert response.status_code == 200
    assert fake_openai.requests[0]["model"] == "fake-model"


def test_check_model_is_refused_to_everyone_but_owner_and_staff(
    client, other_web, staff_web, owner, fake_bot, fake_openai
):
    shared = BotFactory(owner=owner, is_shared=True, model="openai/fake-model")
    UserFactory(username="bystander")

    anonymous = client.post(f"/bots/{fake_bot.pk}/check/")
    assert anonymous.status_code == 401
    not_theirs = other_web.post(f"/bots/{fake_bot.pk}/check/")
    assert not_theirs.status_code == 404
    assert not_theirs.json()["error"]["code"] == "not_found"
    read_only = other_web.post(f"/bots/{shared.pk}/check/")
    assert read_only.status_code == 403
    assert other_web.get(f"/bots/{fake_bot.pk}/check/").status_code == 405
    assert fake_openai.requests == []

    # Staff may check a shared bot they do not own (they may edit it too).
    fake_openai.script(Reply(text="ok"))
    shared.api_base = fake_bot.api_base
    shared.api_base_approved = fake_bot.api_base
    shared.api_key_env = FAKE_KEY_ENV
    shared.save()
    assert staff_web.post(f"/bots/{shared.pk}/check/").json()["ok"] is True


@pytest.mark.django_db(transaction=True)
def test_check_model_is_charged_to_the_user_and_refused_once_the_limit_is_spent(
    owner, owner_web, fake_bot, fake_openai
):
    """A check is a provider call like any other: its tokens count on the user's daily limit,
    and a spent limit refuses it before any call (checks were free, past any limit)."""
    from connections.models import TokenCounter, UserQuota

    UserQuota.objects.create(user=owner, daily_token_limit=30)
    fake_openai.script(
        Reply(text="ok", usage={"prompt_tokens": 25, "completion_tokens": 5, "total_tokens": 30})
    )
    assert owner_web.post(f"/bots/{fake_bot.pk}/check/").json()["ok"] is True
    counter = TokenCounter.objects.get(subject=f"user:{owner.pk}")
    assert (counter.used, counter.reserved) == (30, 0)

    refused = owner_web.post(f"/bots/{fake_bot.pk}/check/")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert len(fake_openai.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_check_model_holds_no_database_connection_while_the_provider_thinks(
    owner_web, fake_bot, fake_openai, monkeypatch
):
    from django.db import connection

    from bots import model_check

    held: list[bool] = []
    complete = model_check.gateway.complete

    def note_connection(*args, **kwargs):
        held.append(connection.connection is not None)
        return complete(*args, **kwargs)

    monkeypatch.setattr(model_check.gateway, "complete", note_connection)
    fake_openai.script(Reply(text="ok"))
    assert owner_web.post(f"/bots/{fake_bot.pk}/check/").json()["ok"] is True
    assert held == [False]
