"""Settings, read once from the environment (django-environ).

Embedded mode (``REDIS_URL`` unset): SQLite by default, Celery tasks on in-process background
threads (``chat_platform/inprocess.py``), in-memory channel layer, in-process single-flight lock.
Real mode (``REDIS_URL`` set): Celery broker and channel layer on Redis, a separate worker.
Nothing else switches the two.

The settings are read in this order, one module a subject: ``core``, ``auth``, ``web``,
``queues``, ``turns``; then logging, and last the check that no provider key is a setting.
"""

from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from chat_platform import provider_policy

# In this order: each module reads its part of the environment, and may use the ones before it.
# isort: off
from chat_platform.settings.core import *  # noqa: F403
from chat_platform.settings.auth import *  # noqa: F403
from chat_platform.settings.web import *  # noqa: F403
from chat_platform.settings.queues import *  # noqa: F403
from chat_platform.settings.turns import *  # noqa: F403

# isort: on
from chat_platform.settings.core import EMBEDDED, env
from chat_platform.settings.turns import PROVIDER_KEY_ENV_ALLOWED

# --- Logging ----------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOG_JSON = env.bool("LOG_JSON", default=not EMBEDDED)
from chat_platform.log_config import configure_logging  # noqa: E402

LOGGING_CONFIG = None
configure_logging(level=LOG_LEVEL, json=LOG_JSON)

# Keep this last: a provider key may never be a setting of Django or of this project, nor any
# variable read above (DATABASE_URL, REDIS_URL…), or a bot could send it to its api_base.
try:
    PROVIDER_KEY_ENV_ALLOWED = provider_policy.key_env_allow_list_check(
        PROVIDER_KEY_ENV_ALLOWED,
        forbidden={n for n in dir(global_settings) if n.isupper()}
        | {n for n in list(globals()) if n.isupper()}
        | env.read,
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"PROVIDER_KEY_ENV_ALLOWED {exc}") from None
