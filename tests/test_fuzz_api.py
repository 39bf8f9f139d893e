"""No 500 from input: schemathesis generates requests from the API's own OpenAPI schema
(``/api/schema/``), valid and invalid ones, for every operation and every body media type it
declares (JSON, form, multipart), and each is sent twice, anonymous and signed in. No answer may
be a 5xx (docs/testing.md, docs/security.md).

Bounded: ``FUZZ_MAX_EXAMPLES`` examples per operation, mode and media type, derandomised so a
failure repeats. In the suite: 1 example over a subset of operations (``QUICK_PATHS``) so it
stays well under a minute and a half; ``make fuzz`` runs the whole schema with more examples.
"""

import contextlib
import itertools
import os

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

from tests.factories import BotFactory, SessionFactory, message_add  # noqa: E402
from turns import dispatch  # noqa: E402

pytestmark = pytest.mark.fuzz

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "1"))
# In the suite, the operations where input reached the database unchecked (bots' settings and
# their multipart forms, API keys, sessions, messages, records, connections); ``make fuzz``
# (FUZZ_ALL=1) walks the whole schema.
FUZZ_ALL = os.environ.get("FUZZ_ALL") == "1"
QUICK_PATHS = {
    "/api/v1/bots/",
    "/api/v1/bots/{bot_id}/",
    "/api/v1/api-keys/",
    "/api/v1/api-keys/{prefix}/",
    "/api/v1/sessions/{session_id}/",
    "/api/v1/sessions/{session_id}/messages/",
    "/api/v1/sessions/{session_id}/records/{name}/",
    "/api/v1/connections/{connection_id}/",
}
HYPOTHESIS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def api_schema(db, monkeypatch):
    from django.core import signals
    from django.db import close_old_connections

    from chat_platform.wsgi import application

    # The requests run in this thread, inside the test's transaction: like Django's test client,
    # keep the request signals from closing its connection.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application)

    # The hand-overs to the task queue are not sent: no worker runs here, and what a turn does
    # is not this test's subject.
    monkeypatch.setattr(dispatch, "turn_dispatch", lambda message_id: True)
    monkeypatch.setattr(dispatch, "compact_soft_dispatch", lambda *args: True)
    try:
        yield schema
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def _server_errors(operation, token: str, own: dict[str, int]) -> list[tuple]:
    """Random ids, anonymous and signed in; then, signed in, the ids of the user's own objects
    (where the view gets past its lookup)."""
    found: list[tuple] = []
    media_types = [body.media_type for body in operation.body] or [None]
    signed_in = {"Authorization": f"Token {token}"}
    mine = {name: value for name, value in own.items() if "{" + name + "}" in operation.path}
    passes = [(None, ({}, signed_in))] + ([(mine, (signed_in,))] if mine else [])
    for path_parameters, personas in passes:
        for mode, media_type in itertools.product(
            (GenerationMode.POSITIVE, GenerationMode.NEGATIVE), media_types
        ):
            strategy = operation.as_strategy(
                mode, media_type=media_type, path_parameters=path_parameters
            )

            @given(case=strategy)
            @HYPOTHESIS
            def send(case) -> None:
                for headers in personas:
                    response = case.call(headers=headers)
                    if response.status_code >= 500:
                        found.append(
                            (
                                case.method,
                                case.formatted_path,
                                case.media_type,
                                repr(case.body)[:200],
                                response.status_code,
                                response.text[:200],
                            )
                        )

            # Unsatisfiable: nothing to make invalid here (no parameters, no body).
            with contextlib.suppress(Unsatisfiable):
                send()
    return found


@pytest.mark.timeout(3600 if FUZZ_ALL else 300)  # bounded by the example counts, on 2 cores
def test_no_generated_request_gets_a_server_error(api_schema, owner, owner_client):
    bot = BotFactory(owner=owner)
    session = SessionFactory(user=owner, bot=bot)
    message_add(session, role="user", content="The launch is on 14 March.")
    reply = message_add(session, role="assistant", content="Noted.")
    own = {"bot_id": bot.pk, "session_id": session.pk, "message_id": reply.pk}
    found: list[tuple] = []
    operations = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        if not FUZZ_ALL and operation.path not in QUICK_PATHS:
            continue
        operations += 1
        found += _server_errors(operation, owner_client.token, own)
    assert operations > (50 if FUZZ_ALL else 12)  # the schema (or the subset) was walked
    assert found == []
