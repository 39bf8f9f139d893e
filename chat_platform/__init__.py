"""chat-platform project package (settings, ASGI, Celery app, model gateway).

Named ``chat_platform`` rather than ``platform`` so that it never shadows the standard library.
"""

from chat_platform.offline import ensure_offline_environment

# Every process (web, worker, beat, tests, commands) imports this package first, so this is the
# one place that keeps litellm and tiktoken off the network.
ensure_offline_environment()

from chat_platform.celery_app import app as celery_app  # noqa: E402

__all__ = ["celery_app"]
