"""Celery (queues, routes, beat) and the Channels layer: Redis in real mode, in-process in
embedded mode."""

from django.core.exceptions import ImproperlyConfigured

from chat_platform.settings.core import EMBEDDED, REDIS_URL, TIME_ZONE, env
from chat_platform.settings.web import ATTACHMENT_SWEEP_SECONDS

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or None
# Never eager (a task run inside the request that dispatched it blocks that request): embedded
# mode runs tasks on a pool of EMBEDDED_TASK_THREADS background threads in the web process
# (chat_platform/inprocess.py), real mode on the workers. Only tests set task_always_eager.
CELERY_TASK_ALWAYS_EAGER = False
TASKS_IN_PROCESS = EMBEDDED
EMBEDDED_TASK_THREADS = env.int("EMBEDDED_TASK_THREADS", default=4)
if EMBEDDED_TASK_THREADS < 1:
    raise ImproperlyConfigured("EMBEDDED_TASK_THREADS must be at least 1")
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 3600,
    # Dead peers are noticed by TCP keep-alive; a connect to an unreachable host gives up after
    # 5 s and is retried. (Not retry_on_timeout: it turns off kombu's batched publishing, and a
    # timed-out publish is already retried by Celery's publish retry.)
    "socket_keepalive": True,
    "socket_connect_timeout": 5,
}
# Riding out a broker outage (docs/operations.md, "When Redis or PostgreSQL is down"): a worker,
# beat or web process keeps trying to reach Redis with Celery's back-off (2 s more per attempt,
# at most 30 s apart) for as long as it is down; the default gives up after 100 attempts and the
# worker exits. Result-backend calls (compaction waits) are retried too.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_RESULT_BACKEND_ALWAYS_RETRY = True
CELERY_RESULT_BACKEND_MAX_RETRIES = 10
# Threads of one worker process (scripts/worker.sh passes it as -c to each process). The
# broker pool serves those threads' publishes (a turn schedules compaction, the watchdog
# re-dispatches), so it is sized from them rather than Celery's default of 10.
CELERY_WORKER_CONCURRENCY = env.int("CELERY_WORKER_CONCURRENCY", default=16)
CELERY_BROKER_POOL_LIMIT = env.int(
    "CELERY_BROKER_POOL_LIMIT", default=max(10, CELERY_WORKER_CONCURRENCY // 2)
)
CELERY_REDIS_MAX_CONNECTIONS = env.int(
    "CELERY_REDIS_MAX_CONNECTIONS", default=CELERY_WORKER_CONCURRENCY + 10
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The beat's upkeep (the turns watchdog, the sweeps) has a queue of its own, served by the beat
# process itself (``make beat``: ``celery worker -B -Q upkeep``, two threads), never by the
# fleet: on the chat queue the watchdog waited for a free thread, and when every thread held a
# slow reply a dead worker's reply stayed ``streaming`` ~130 s instead of timeout + interval
# (docs/operations.md, "The upkeep lane").
UPKEEP_QUEUE = "upkeep"
UPKEEP_TASKS = (
    "bots.tasks.turns_watchdog",
    "bots.tasks.sweep_orphans",
    "attachments.tasks.sweep_unsent",
    "transfer.tasks.sweep_jobs",
    "compaction.tasks.context_records_sweep",
)
CELERY_TASK_ROUTES = {
    # Exact names before patterns (Celery's map routes): these leave bots.tasks.* and the rest.
    **{name: {"queue": UPKEEP_QUEUE} for name in UPKEEP_TASKS},
    "bots.tasks.*": {"queue": "chat"},
    "compaction.tasks.*": {"queue": "compaction"},
    # Parsing what users upload (a PDF's text, an import file): its own queue, so a slow or
    # hostile file never delays a reply or a summary (docs/security.md, "Heavy work").
    "attachments.tasks.extract": {"queue": "heavy"},
    "transfer.tasks.*": {"queue": "heavy"},
    # A web request's search question, embedded while the request waits (memory.query_embedding):
    # interactive, short, so with the replies rather than behind summaries.
    "memory.tasks.query_embed": {"queue": "chat"},
    # Embedding compacted messages (memory.embeddings) is compaction's follow-up work.
    "memory.tasks.*": {"queue": "compaction"},
}
CELERY_TASK_DEFAULT_QUEUE = "chat"


def upkeep_entry(task: str, schedule: float) -> dict:
    """A beat entry of the upkeep lane. A run not taken within its period expires (the next
    one is on its way): while the lane was down its runs are dropped, not run back to back."""
    return {"task": task, "schedule": schedule, "options": {"expires": schedule}}


CELERY_BEAT_SCHEDULE = {
    "sweep-orphans": upkeep_entry("bots.tasks.sweep_orphans", 60.0),
    "sweep-unsent-attachments": upkeep_entry(
        "attachments.tasks.sweep_unsent", ATTACHMENT_SWEEP_SECONDS
    ),
    "import-jobs-sweep": upkeep_entry("transfer.tasks.sweep_jobs", 300.0),
}
CELERY_TIMEZONE = TIME_ZONE

# --- Channels ---------------------------------------------------------------------------------
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis's layer, with a receive that can be cancelled (a socket closing)
            # without losing a frame meant for another socket (chat_platform/channel_layer.py).
            "BACKEND": "chat_platform.channel_layer.CancelSafeRedisChannelLayer",
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout by default, the same 5 s that
                # channels-redis blocks in BZPOPMIN: the read then races the command and a
                # consumer dies with "Timeout reading". Reads must outlast the blocking command.
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": 30,
                        # Connections per process and event loop. redis-py's asyncio pool
                        # allows 100 by default and raises MaxConnectionsError past it (seen
                        # as group_discard failures when 200 websockets closed at once).
                        "max_connections": env.int("CHANNEL_LAYER_MAX_CONNECTIONS", default=1000),
                    }
                ],
                # Messages kept per channel before new ones are dropped. Every websocket of one
                # web process shares that process's one Redis list (channels-redis "!" channels),
                # so this bounds the frames waiting for a whole process: at 1,000 a burst of 200
                # turns (~15 frames each) overflowed it and replies lost their final frames. A
                # frame delivered late beats one dropped; the list expires with `expiry`.
                "capacity": env.int("CHANNEL_LAYER_CAPACITY", default=20_000),
                "expiry": 60,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
