"""The question's vector for a search the web process serves (the records API's ``?q=``, which the
memory panel calls): embedded on a worker, never in the request (docs/memory.md, "Hybrid
search").

Embedding a question is model work: the built-in model loads its weights (tens of MB) and runs
them on the CPU, a provider's is an HTTP call of up to ``EMBEDDING_TIMEOUT_SECONDS``. The web
process hands it to the ``memory.tasks.query_embed`` task instead — real mode: the ``chat``
queue's workers, the result back through Celery's result backend; embedded mode: the in-process
task threads (``chat_platform.inprocess.task_call``) — and waits for the answer at most
``EMBEDDING_TIMEOUT_SECONDS``, with its database connection given back first (the wait holds
none). No answer in time, no worker, a broker that is down, a failed task: the search is lexical,
with the same warning as when the model fails (``memory_search_embedding_failed``,
``fallback=lexical``). A recall search already runs on a worker and embeds in place
(``memory.embeddings.query_vector``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from django.conf import settings
from django.db import connection

from bots.models import Bot
from chat_platform import inprocess
from chat_platform.celery_app import app as celery_app
from chat_platform.celery_app import task_named
from connections import usage
from memory import embeddings

if TYPE_CHECKING:
    import numpy as np

log = structlog.get_logger(__name__)

QUERY_TASK = "memory.tasks.query_embed"


def query_values(
    *, bot_id: int, text: str, user_id: int, quota: embeddings.Quota = None
) -> list[float] | None:
    """The worker's side: the question's vector as floats (JSON carries them exactly), or
    ``None`` (a vanished bot, no embedding model, the model failed: logged there). Charged to
    ``quota`` too: the limits of the API key the search came through."""
    bot = Bot.objects.filter(pk=bot_id).first()
    if bot is None:
        return None
    with usage.quota_scope(extra=usage.limits_from_pairs(quota)):
        vector = embeddings.query_vector(bot, text, user_id=user_id)
    return None if vector is None else [float(v) for v in vector]


def query_vector_from_worker(bot: Bot, text: str, *, user_id: int) -> np.ndarray | None:
    """The web process's side: the question's vector, embedded by ``QUERY_TASK`` on a worker
    (an in-process task thread in embedded mode) within ``EMBEDDING_TIMEOUT_SECONDS``; ``None``
    when it is not to be had (the search goes on lexically)."""
    if not bot.embedding_model or not text.strip():
        return None
    wait = float(settings.EMBEDDING_TIMEOUT_SECONDS)
    task = task_named(QUERY_TASK)
    quota = usage.scope_pairs()  # the key the search came through pays for it too
    args = (bot.pk, text, user_id, quota) if quota else (bot.pk, text, user_id)
    if not connection.in_atomic_block:
        connection.close()  # the wait holds no connection (a pool takes it back)
    try:
        if settings.TASKS_IN_PROCESS and not celery_app.conf.task_always_eager:
            values = inprocess.task_call(task, args).result(timeout=wait)
        else:
            result = task.apply_async(args)
            values = result.get(timeout=wait)
            result.forget()
    except Exception as exc:  # no answer in time, no broker, a failed task: words only
        log.warning(
            "memory_search_embedding_failed",
            bot_id=bot.pk,
            model=bot.embedding_model,
            reason=f"{type(exc).__name__}: {exc}"[:300],
            fallback="lexical",
        )
        return None
    if values is None:
        return None
    import numpy as np  # only where vectors are used: Django's start-up never loads numpy

    return np.asarray(values, dtype="<f4")
