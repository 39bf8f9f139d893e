import os
import threading
from typing import Any

from celery import Celery
from celery.signals import (
    setup_logging,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutting_down,
)
from django.conf import settings

from chat_platform.log_config import configure_logging
from chat_platform.warmup import warm_in_background, warm_worker_first_turn

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")

# Embedded mode: the task class runs tasks on in-process threads (chat_platform/inprocess.py).
app = Celery("chat_platform", task_cls="chat_platform.inprocess:InProcessTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_discovery_lock = threading.Lock()


def task_named(name: str) -> Any:
    """The registered task ``name``. Task modules are found by autodiscovery, which a worker
    runs at start and a web process only when first asked; two threads discovering at once (the
    embedded beat and a first send) left one of them with ``NotRegistered``. So every lookup by
    name goes through here: one discovers, the others wait for it and look again."""
    if name not in app.tasks:
        with _discovery_lock:
            if name not in app.tasks:
                _discover()
    return app.tasks[name]


_discovered = False


def _discover() -> None:
    global _discovered
    app.loader.import_default_modules()
    _discovered = True


def tasks_discover() -> None:
    """Run the autodiscovery a web process's first dispatch would run (``task_named``), now:
    its Django fixup runs Django's system checks (~0.9 s once). For the web's warm-up thread."""
    with _discovery_lock:
        if not _discovered:
            _discover()


# Riding out a broker outage: the retry settings are in settings/queues.py (CELERY_BROKER_*);
# here, the one kombu defect that would still end a worker. (Nothing here may read app.conf: that
# would load Django's settings whenever the package is imported.)


def _connection_errors_for_a_closed_transport() -> None:
    """kombu's Redis channel on a transport that was already closed raises a connection error.

    On a lost broker connection Celery 5.7 first ``collect()``s the connection (which detaches
    its transport) and then ``close()``s it; closing the channel that still holds delivered
    messages tries to requeue them and asks the detached transport for its host:
    ``AttributeError: 'NoneType' object has no attribute 'hostname'``. That is not one of the
    connection errors the close ignores, so it escaped as "Unrecoverable error" and the worker
    exited (seen with 16 threads per process and turns running when Redis stopped). Raised as
    a redis ``ConnectionError`` instead, the close ignores it like the requeue that failed
    because Redis is down, and the worker reconnects. Nothing is lost by not requeueing: the
    messages stay in Redis' unacked set (restored after the visibility timeout) or went with
    Redis, and the turns' watchdog hands a reply that never started to the queue again.
    """
    from kombu.transport import redis as kombu_redis
    from redis.exceptions import ConnectionError as RedisConnectionError

    original = kombu_redis.Channel._connparams
    if getattr(original, "closed_transport_guard", False):
        return

    def _connparams(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("the broker connection of this channel was closed")
        return original(self, *args, **kwargs)

    _connparams.closed_transport_guard = True  # type: ignore[attr-defined]
    kombu_redis.Channel._connparams = _connparams


_connection_errors_for_a_closed_transport()


@setup_logging.connect
def _use_platform_logging(**kwargs: Any) -> None:
    """Worker and beat log through our configuration (JSON lines in real mode).

    With a receiver on this signal Celery installs no handlers of its own and leaves the root
    logger alone; its loggers (``celery.*``) propagate to ours. Its task-aware format is not
    needed: task id and name are fields of our events where they matter.
    """
    configure_logging(level=settings.LOG_LEVEL, json=settings.LOG_JSON)


@worker_ready.connect
def _warm_gateway_on_ready(**kwargs: Any) -> None:
    """The worker's first turn should not pay litellm's import (seconds): pay it at start, in the
    background. With the thread pool (the Makefile's ``-P threads``) the tasks run in this very
    process; prefork children are warmed by ``worker_process_init`` below. Its first turn's
    token encoding too (``warm_worker_first_turn``). Not the beat's upkeep lane (``-Q upkeep``):
    it runs no turn."""
    if _consumed == frozenset({settings.UPKEEP_QUEUE}):
        return
    warm_in_background("worker", then=warm_worker_first_turn)


# The queues this process's worker consumes (``worker_init``); None outside a worker.
_consumed: frozenset[str] | None = None


def runs_task(name: str) -> bool:
    """Whether task ``name``, sent now, could run in this very process: an embedded server runs
    every task here; a worker, those of the queues it consumes (``scripts/worker.sh``,
    ``WORKER_QUEUES``; the queue is the task's route, settings/queues.py); a web process of real
    mode, and tests that run tasks inline (``task_always_eager``), none."""
    if app.conf.task_always_eager:
        return False
    if getattr(settings, "TASKS_IN_PROCESS", False):
        return True
    if _consumed is None:
        return False
    return app.amqp.router.route({}, name)["queue"].name in _consumed


@worker_init.connect
def _startup_checks(sender: Any = None, **kwargs: Any) -> None:
    """A worker whose CONNECTION_ENCRYPTION_KEY cannot open the stored keys stops at start. It
    notes the queues it consumes (``runs_task``)."""
    from chat_platform.startup import startup_checks_run

    global _consumed
    queues = getattr(getattr(getattr(sender, "app", None), "amqp", None), "queues", None)
    if queues is not None:
        _consumed = frozenset(queues.consume_from or queues)
    startup_checks_run()


@worker_process_init.connect
def _warm_gateway_in_child(**kwargs: Any) -> None:
    warm_in_background("worker_child", then=warm_worker_first_turn)


@worker_shutting_down.connect
def _background_stops(**kwargs: Any) -> None:
    """A warm shutdown starts no more of the work that waits for the turns
    (``chat_platform.foreground``): the worker stops once its running tasks end."""
    from chat_platform import foreground

    foreground.stop()
