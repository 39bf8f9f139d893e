import os
from typing import Any

from celery import Celery
from celery.signals import setup_logging, worker_process_init, worker_ready
from django.conf import settings

from chat_platform.log_config import configure_logging
from chat_platform.warmup import warm_in_background

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")

app = Celery("chat_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


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
    process; prefork children are warmed by ``worker_process_init`` below."""
    warm_in_background("worker")


@worker_process_init.connect
def _warm_gateway_in_child(**kwargs: Any) -> None:
    warm_in_background("worker_child")
