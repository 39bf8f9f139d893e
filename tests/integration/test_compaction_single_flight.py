"""Single flight across cold processes (docs/compaction.md, "Single flight"): two
``manage.py compact_session`` processes and five ``POST …/compact/`` calls to a real web server at
once (three processes racing for one lease) compact the session once. Each process loads
litellm before it takes the lease, so no late caller runs out of wait (``compaction_busy``)
behind others' imports; a late caller's pass finds nothing left and answers "Nothing to compact
right now."."""

import subprocess
import sys
import threading

import httpx
import pytest
import redis
from django.conf import settings
from rest_framework.authtoken.models import Token

from chat_platform.heavy import slots_key
from compaction.models import CompactionEvent, Summary
from tests.compaction.test_engine import GOOD, add_history, recount, summariser_requests
from tests.factories import SessionFactory
from tests.fakeopenai import Reply
from tests.integration.processes import ROOT, process_env, web_server

pytestmark = [
    pytest.mark.crossprocess,
    pytest.mark.django_db(transaction=True),
]

COMPACTED = "Context compacted: "
NOTHING = "Nothing to compact right now."
# Cold processes besides the web server: two are enough to race each other and the server for
# the one lease (five cost a minute of CPU more on two cores and proved no more).
COMMANDS = 2


def test_two_commands_and_five_api_calls_compact_once(owner, fake_bot, fake_openai, tmp_path):
    fake_bot.context_window = 20_000
    fake_bot.max_output_tokens = 1000
    fake_bot.system_prompt = ""
    fake_bot.memory_index_size = 0
    fake_bot.save()
    session = SessionFactory(user=owner, bot=fake_bot)
    add_history(session, [3000, 3000, 3000, 3000, 100, 100])
    recount(session)
    token = Token.objects.create(user=owner).key
    redis.Redis.from_url(settings.REDIS_URL).delete(slots_key(owner.pk))  # none left by others
    fake_openai.script(Reply(text=GOOD, hang=3.0))  # the one summariser call takes 3 s
    db = settings.DATABASES["default"]
    env = process_env(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        DEBUG="false",
        LOG_JSON="true",
    )

    with web_server(env, tmp_path / "web.log") as base:
        answers: list[httpx.Response] = []

        def compact() -> None:
            answers.append(
                httpx.post(
                    f"{base}/api/v1/sessions/{session.pk}/compact/",
                    json={},
                    headers={"Authorization": f"Token {token}"},
                    timeout=180,
                )
            )

        commands = [
            subprocess.Popen(  # noqa: S603
                [sys.executable, "manage.py", "compact_session", str(session.pk)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(COMMANDS)
        ]
        threads = [threading.Thread(target=compact) for _ in range(5)]
        for thread in threads:
            thread.start()
        outputs = [command.communicate(timeout=300) for command in commands]
        for thread in threads:
            thread.join(300)

    assert [c.returncode for c in commands] == [0] * COMMANDS, [err[-2000:] for _, err in outputs]
    notices = [out.strip() for out, _ in outputs]
    assert all(n.startswith(COMPACTED) or n == NOTHING for n in notices), notices
    assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
    assert {a.json()["outcome"] for a in answers} <= {"compacted", "noop"}
    assert len(summariser_requests(fake_openai)) == 1
    assert Summary.objects.filter(session=session).count() == 1
    events = CompactionEvent.objects.filter(session=session)
    assert events.filter(outcome="compacted").count() == 1
    assert set(events.values_list("outcome", flat=True)) <= {"compacted", "noop"}
