"""``redaction.secret_values`` works the secrets out again only when what they come from
changed (issue 36: every log line passes it, several times a turn), and sees every change."""

from chat_platform import redaction


def test_secrets_are_worked_out_once_until_their_sources_change(monkeypatch, settings):
    worked = []
    real = redaction._secret_values

    def counting(*args):
        worked.append(1)
        return real(*args)

    monkeypatch.setattr(redaction, "_secret_values", counting)
    monkeypatch.setattr(redaction, "_last", None)
    monkeypatch.setattr(redaction, "_registered", set(redaction._registered))  # this test's own
    first = redaction.secret_values()
    assert redaction.secret_values() == first
    assert redaction.secret_values() is first
    assert len(worked) == 1

    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-0123456789")
    assert "tok-0123456789" in redaction.secret_values()
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-9876543210")
    assert "tok-0123456789" not in redaction.secret_values()
    monkeypatch.setenv("PLAIN_SETTING", "listed-value-123")
    assert "listed-value-123" not in redaction.secret_values()
    settings.PROVIDER_KEY_ENV_ALLOWED = ["PLAIN_SETTING"]
    assert "listed-value-123" in redaction.secret_values()
    settings.SECRET_KEY = "a-new-django-secret-key"
    assert "a-new-django-secret-key" in redaction.secret_values()
    redaction.register_secret("registered-secret-42")
    assert redaction.redact("x registered-secret-42 y") == "x *** y"
    assert len(worked) == 7
