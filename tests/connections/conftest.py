import pytest

ENCRYPTION_KEY = "test-connection-encryption-key-0123456789abcdef"
SECRET_API_KEY = "sk-conn-secret-4f9a7c2e1b8d6035"


@pytest.fixture(autouse=True)
def _encryption_key(settings):
    settings.CONNECTION_ENCRYPTION_KEY = ENCRYPTION_KEY


@pytest.fixture
def fake_connection(staff, fake_openai):
    from connections.services import connection_create, connection_models_refresh

    connection = connection_create(
        user=staff, name="Fake", kind="openai", base_url=fake_openai.url, api_key=SECRET_API_KEY
    )
    return connection_models_refresh(user=staff, connection_id=connection.pk)


@pytest.fixture(autouse=True)
def _no_key_in_any_answer_or_log_line(monkeypatch, caplog, capfd):
    """Every test here also checks, after it ran, that no connection key it stored or used is in
    any answer the test client got (API, page, admin, error) or in any log line or output of the
    process: the keys this suite knows, and every key the process encrypted or decrypted
    (``chat_platform.redaction`` registers each one)."""
    import logging

    from django.test import client as test_client

    from chat_platform import redaction

    answers: list[str] = []
    handle = test_client.ClientHandler.__call__

    def recording(self, environ):
        response = handle(self, environ)
        if not response.streaming:
            answers.append(response.content.decode("utf-8", errors="replace"))
        return response

    monkeypatch.setattr(test_client.ClientHandler, "__call__", recording)
    caplog.set_level(logging.DEBUG)
    yield
    out, err = capfd.readouterr()
    # caplog.text is the current (teardown) phase's only: format the records of every phase.
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    records = [
        formatter.format(record)
        for phase in ("setup", "call", "teardown")
        for record in caplog.get_records(phase)
    ]
    texts = {"answers": "\n".join(answers), "log records": "\n".join(records), "output": out + err}
    keys = {SECRET_API_KEY, *redaction._registered}  # the process's registered keys
    leaks = [(where, key) for key in keys for where, text in texts.items() if key in text]
    assert leaks == [], f"a connection key left the process: {leaks}"
