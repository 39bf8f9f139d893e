"""Settings, read once from the environment (django-environ).

Embedded mode (``REDIS_URL`` unset): SQLite by default, Celery tasks on in-process background
threads (``chat_platform/inprocess.py``), in-memory channel layer, in-process single-flight lock.
Real mode (``REDIS_URL`` set): Celery broker and channel layer on Redis, a separate worker.
Nothing else switches the two.
"""

from pathlib import Path

import environ
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from chat_platform import content_security, oidc, provider_policy

BASE_DIR = Path(__file__).resolve().parent.parent


class _Env(environ.Env):
    """Remembers every variable the settings read: none of them may ever be a provider key."""

    read: set[str] = set()

    def get_value(self, var, *args, **kwargs):
        self.read.add(var)
        return super().get_value(var, *args, **kwargs)


env = _Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is required when DEBUG is false")
    SECRET_KEY = "insecure-development-key-only-used-with-debug"  # noqa: S105
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# --- HTTPS ------------------------------------------------------------------------------------
# HTTPS=true (served over TLS, directly or behind a proxy) turns on secure cookies, HSTS and the
# redirect to https; each can still be set on its own. Off by default so the embedded mode and a
# localhost server work over plain http, also with DEBUG=false.
HTTPS = env.bool("HTTPS", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=HTTPS)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=HTTPS)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=HTTPS)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=HTTPS)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=HTTPS)
# Behind a TLS-terminating proxy: SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https (only if
# the proxy always sets or strips that header).
_proxy_ssl_header = env.list("SECURE_PROXY_SSL_HEADER", default=[])
if _proxy_ssl_header and (
    len(_proxy_ssl_header) != 2 or not _proxy_ssl_header[0].startswith("HTTP_")
):
    raise ImproperlyConfigured(
        "SECURE_PROXY_SSL_HEADER must be '<HTTP_HEADER_NAME>,<value>', "
        "e.g. HTTP_X_FORWARDED_PROTO,https"
    )
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl_header) if _proxy_ssl_header else None

# --- Content-Security-Policy (chat_platform/content_security.py, docs/security.md) ------------
# Self-hosted assets only; images also from data: and the origins listed here (comma-separated
# http(s) origins, e.g. https://img.example.com). Replies are model output: an image it names is
# fetched only from these, and the chat shows any other as a link.
try:
    CSP_IMG_SRC_EXTRA = content_security.image_origins_parse(
        env.list("CSP_IMG_SRC_EXTRA", default=[])
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"CSP_IMG_SRC_EXTRA: {exc}") from None
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": content_security.directives(img_src_extra=CSP_IMG_SRC_EXTRA)
}

REDIS_URL = env.str("REDIS_URL", default="")
EMBEDDED = not REDIS_URL

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    # The API-key library (its hashing; our ApiKey model extends its abstract one).
    "rest_framework_api_key",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "bots",
    "compaction",
    "memory",
    "transfer",
    "openai_api",
    # Accounts (docs/accounts.md): django-allauth's sign-up, email, password reset, TOTP and
    # OpenID Connect; the app ``accounts`` holds the sign-up modes, invitations and approvals.
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.mfa",
    "accounts",
    "attachments",
    "connections",
]

MIDDLEWARE = [
    # Outside even the error shape below, so every answer carries the policy.
    "chat_platform.content_security.ContentSecurityPolicyMiddleware",
    # Outermost but for the policy, so it sees every answer: errors under /api/ are always the
    # JSON error shape.
    "chat_platform.api.ApiErrorShapeMiddleware",
    # NUL in a path parameter or an /api/ query value: 400 before any view or lookup.
    "chat_platform.request_text.UnstorableUrlTextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # allauth's login stages and its ImmediateHttpResponse (a refused invitation, SSO domain).
    "allauth.account.middleware.AccountMiddleware",
]

ROOT_URLCONF = "chat_platform.urls"
ASGI_APPLICATION = "chat_platform.asgi.application"
WSGI_APPLICATION = "chat_platform.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + immediate transactions: the chat turn writes from a second thread in embedded mode.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"}
    )
elif env.bool("DATABASE_POOL", default=True):
    # psycopg's pool, one per process, shared by its threads (uvicorn's thread-sensitive sync
    # thread and its executor, Celery's thread pool). A thread borrows a connection for one
    # request or task and gives it back; past max_size it waits up to DATABASE_POOL_TIMEOUT and
    # then fails with a clear error instead of PostgreSQL's "too many clients".
    # Budget (docs/operations.md): sum over processes of max_size <= max_connections - reserve.
    # Django requires CONN_MAX_AGE = 0 with a pool: the pool keeps connections open.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASE_POOL_MIN_SIZE = env.int("DATABASE_POOL_MIN_SIZE", default=1)
    DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=10)
    DATABASE_POOL_TIMEOUT = env.float("DATABASE_POOL_TIMEOUT", default=10.0)
    if not 0 <= DATABASE_POOL_MIN_SIZE <= DATABASE_POOL_MAX_SIZE or DATABASE_POOL_MAX_SIZE < 1:
        raise ImproperlyConfigured(
            "DATABASE_POOL_MIN_SIZE and DATABASE_POOL_MAX_SIZE: need 0 <= min <= max, max >= 1"
        )
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": DATABASE_POOL_MIN_SIZE,
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": DATABASE_POOL_TIMEOUT,
        # a connection idle this long is closed (the pool shrinks back toward min_size)
        "max_idle": env.float("DATABASE_POOL_MAX_IDLE", default=300.0),
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=0))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat"
LOGOUT_REDIRECT_URL = "login"

# --- Accounts (accounts app, django-allauth; docs/accounts.md) ------------------------------
# The login page stays Django's (accounts.views.SignInView: same form, same throttle); a correct
# password is handed to allauth's login flow, which asks for the TOTP code when the account has
# one. Sign-up, email verification, password reset, TOTP set-up and SSO are allauth's pages.
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_SIGNUP_MODES = ("closed", "invite", "approval", "open")
# closed: staff create accounts; invite: a single-use link from staff; approval: anyone signs
# up and waits (inactive) until staff approve; open: anyone. Closed unless said otherwise, in
# both modes: a site is never open by accident.
ACCOUNT_SIGNUP_MODE = env.str("ACCOUNT_SIGNUP_MODE", default="closed")
if ACCOUNT_SIGNUP_MODE not in ACCOUNT_SIGNUP_MODES:
    raise ImproperlyConfigured(
        f"ACCOUNT_SIGNUP_MODE must be one of {', '.join(ACCOUNT_SIGNUP_MODES)}"
    )
ACCOUNT_INVITE_DAYS = env.int("ACCOUNT_INVITE_DAYS", default=7)
if not 1 <= ACCOUNT_INVITE_DAYS <= 365:
    raise ImproperlyConfigured("ACCOUNT_INVITE_DAYS must be between 1 and 365")
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "accounts.adapter.SocialAccountAdapter"
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_EMAIL_VERIFICATION = env.str("ACCOUNT_EMAIL_VERIFICATION", default="optional")
if ACCOUNT_EMAIL_VERIFICATION not in ("none", "optional", "mandatory"):
    raise ImproperlyConfigured("ACCOUNT_EMAIL_VERIFICATION must be none, optional or mandatory")
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
ACCOUNT_PASSWORD_RESET_BY_CODE_ENABLED = False
# allauth's own rate limits (sign-up, password reset, email confirmation, TOTP codes) stay on;
# password failures are counted by chat_platform/signin.py alone (allauth's login form, the
# only user of its "login_failed" limit for passwords, is not served).
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = env.str("MFA_TOTP_ISSUER", default="chat-platform")
# Email: the console in embedded mode; SMTP from EMAIL_URL in real mode
# (smtp+tls://user:password@host:587, django-environ's form).
EMAIL_URL = env.str("EMAIL_URL", default="consolemail://" if EMBEDDED else "smtp://localhost:25")
globals().update(env.email_url_config(EMAIL_URL))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="chat-platform <noreply@localhost>")
# Single sign-on with any OpenID Connect provider (allauth's openid_connect, chat_platform/oidc.py).
OIDC_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
OIDC_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
OIDC_NAME = env.str("OIDC_NAME", default="single sign-on")
OIDC_ALLOWED_DOMAINS = [d.strip().lower() for d in env.list("OIDC_ALLOWED_DOMAINS", default=[])]
OIDC_CREATE_ACCOUNTS = env.bool("OIDC_CREATE_ACCOUNTS", default=False)
# https only (plain http with DEBUG, for a local provider): the ID token's signature is not
# re-checked when it comes straight from the token endpoint (OpenID Connect Core 3.1.3.7), so
# that connection must be TLS.
if OIDC_ISSUER and not (
    (OIDC_ISSUER.startswith("https://") or (DEBUG and OIDC_ISSUER.startswith("http://")))
    and OIDC_CLIENT_ID
):
    raise ImproperlyConfigured(
        "OIDC_ISSUER must be an https:// URL (http:// only with DEBUG), and needs OIDC_CLIENT_ID"
    )
SOCIALACCOUNT_PROVIDERS = oidc.providers_setting(
    issuer=OIDC_ISSUER, client_id=OIDC_CLIENT_ID, secret=OIDC_CLIENT_SECRET, name=OIDC_NAME
)
SOCIALACCOUNT_AUTO_SIGNUP = True
# An existing account whose email the provider vouches for (email_verified) signs in as itself,
# but only when that account's address was verified here too (or set by staff): the social
# adapter (accounts/adapter.py) never hands a self-registered, unconfirmed account to SSO.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True
SOCIALACCOUNT_STORE_TOKENS = False

# Content over 1 MB is refused with payload_too_large by the service; the request itself may be a
# little larger than that (JSON escaping), so Django's own cap sits above it.
MESSAGE_MAX_BYTES = 1024 * 1024
# The most tokens one search_records result (and one records-API ?q= answer) may fill; a turn
# also never gives it more than what is left of its budget B (docs/memory.md).
SEARCH_RESULT_TOKENS = env.int("SEARCH_RESULT_TOKENS", default=2000)
# Each embedding call (a bot's embedding_model: messages after a compaction, a question when it
# searches) waits at most this long; a search whose call fails goes on with word search alone.
EMBEDDING_TIMEOUT_SECONDS = env.float("EMBEDDING_TIMEOUT_SECONDS", default=10.0)
if EMBEDDING_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfigured("EMBEDDING_TIMEOUT_SECONDS must be more than 0")
# The memory index (one line per record, newest first) takes at most this share of B; the newest
# line is always offered. Search finds the records it leaves out.
MEMORY_INDEX_MAX_PERCENT = env.int("MEMORY_INDEX_MAX_PERCENT", default=10)
# Rooms: at most this many bot-triggered replies (one bot handing the floor to another) per user
# message (docs/rooms.md).
ROOM_MAX_HOPS = env.int("ROOM_MAX_HOPS", default=3)
if ROOM_MAX_HOPS < 0:
    raise ImproperlyConfigured("ROOM_MAX_HOPS must be 0 or more")
DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024
# Attachments (attachments app): the largest file, the most bytes and files one message may
# carry, the most text one file may add (characters), the most pages a PDF may have and the most
# bytes one of its compressed streams may unpack to; an image counts this many tokens (the
# provider's own count depends on its size and detail; this is the estimate admission uses).
ATTACHMENT_MAX_BYTES = env.int("ATTACHMENT_MAX_BYTES", default=10 * 1024 * 1024)
ATTACHMENT_MESSAGE_MAX_BYTES = env.int("ATTACHMENT_MESSAGE_MAX_BYTES", default=20 * 1024 * 1024)
ATTACHMENT_MESSAGE_MAX_FILES = env.int("ATTACHMENT_MESSAGE_MAX_FILES", default=10)
ATTACHMENT_TEXT_MAX_CHARS = env.int("ATTACHMENT_TEXT_MAX_CHARS", default=10 * 1024 * 1024)
ATTACHMENT_PDF_MAX_PAGES = env.int("ATTACHMENT_PDF_MAX_PAGES", default=1000)
ATTACHMENT_PDF_MAX_STREAM_BYTES = env.int(
    "ATTACHMENT_PDF_MAX_STREAM_BYTES", default=50 * 1024 * 1024
)
# Heavy work (a PDF's text, an import's parse) runs in a child process of a worker on the
# "heavy" queue, bounded by these (docs/security.md, "Heavy work"): wall-clock seconds (CPU is
# capped at the same), the child's address space, and the bytes a PDF's pages may decode to.
ATTACHMENT_EXTRACT_SECONDS = env.float("ATTACHMENT_EXTRACT_SECONDS", default=20.0)
ATTACHMENT_EXTRACT_MEMORY_BYTES = env.int("ATTACHMENT_EXTRACT_MEMORY_BYTES", default=768 * 1024**2)
ATTACHMENT_PDF_MAX_DECODED_BYTES = env.int(
    "ATTACHMENT_PDF_MAX_DECODED_BYTES", default=20 * 1024 * 1024
)
ATTACHMENT_IMAGE_TOKENS = env.int("ATTACHMENT_IMAGE_TOKENS", default=1000)
# Uploaded but not yet sent, per chat: more are refused until some are sent.
ATTACHMENT_UNSENT_MAX = env.int("ATTACHMENT_UNSENT_MAX", default=20)
# Uploaded files no sent message claimed within this many seconds are deleted by a sweep (Celery
# beat, every ATTACHMENT_SWEEP_SECONDS; in embedded mode the web server's beat thread).
ATTACHMENT_UNSENT_RETENTION_SECONDS = env.int("ATTACHMENT_UNSENT_RETENTION_SECONDS", default=86400)
if ATTACHMENT_UNSENT_RETENTION_SECONDS < 60:
    raise ImproperlyConfigured("ATTACHMENT_UNSENT_RETENTION_SECONDS must be at least 60")
ATTACHMENT_SWEEP_SECONDS = env.float("ATTACHMENT_SWEEP_SECONDS", default=600.0)
# Import (transfer app): the largest file accepted (a request claiming more is refused before a
# byte is read) and the deepest JSON nesting a file may have (ChatGPT's own is about 10).
IMPORT_MAX_BYTES = env.int("IMPORT_MAX_BYTES", default=512 * 1024 * 1024)
IMPORT_MAX_DEPTH = env.int("IMPORT_MAX_DEPTH", default=64)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's own two, for accounts the login page would let in (chat_platform/account_gate.py).
        "chat_platform.account_gate.TokenAuthentication",
        "chat_platform.account_gate.SessionAuthentication",
        # API keys (openai_api): ``Authorization: Bearer <key>``; a read key may only read.
        "openai_api.auth.ApiKeyAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "openai_api.auth.ApiKeyAccess",
    ],
    "DEFAULT_SCHEMA_CLASS": "chat_platform.api.AutoSchema",
    # JSON only: errors too are JSON for browsers (Swagger UI at /api/docs/ is the explorer).
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "chat_platform.api.exception_handler",
    "DEFAULT_PAGINATION_CLASS": None,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # JSON through the one depth-limited parse (chat_platform/jsontext.py); forms as DRF's own.
    "DEFAULT_PARSER_CLASSES": [
        "chat_platform.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # A client's address is the socket peer (uvicorn already replaces it from X-Forwarded-For
    # for its trusted proxies, FORWARDED_ALLOW_IPS): a client-sent header never names it.
    "NUM_PROXIES": 0,
}

# --- Sign-in throttling (chat_platform/signin.py) --------------------------------------------
# Failed sign-ins (token endpoint, login page, admin login) counted per submitted username and
# per client address over a sliding window; past either limit every attempt, the right password
# included, is refused (429 rate_limited, Retry-After) until the window frees a slot. The counts
# live in the "throttle" cache: Redis in real mode, so every web worker and process shares them.
LOGIN_RATE_PER_ACCOUNT = env.str("LOGIN_RATE_PER_ACCOUNT", default="5/min")
LOGIN_RATE_PER_ADDRESS = env.str("LOGIN_RATE_PER_ADDRESS", default="20/min")
for _name, _rate in (
    ("LOGIN_RATE_PER_ACCOUNT", LOGIN_RATE_PER_ACCOUNT),
    ("LOGIN_RATE_PER_ADDRESS", LOGIN_RATE_PER_ADDRESS),
):
    _count, _, _period = _rate.partition("/")
    if not (_count.isdigit() and int(_count) >= 1 and _period[:1] in ("s", "m", "h", "d")):
        raise ImproperlyConfigured(f"{_name} must be '<count>/<sec|min|hour|day>', e.g. 5/min")
if REDIS_URL:
    _throttle_cache = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "throttle",
    }
else:
    _throttle_cache = {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "throttle",
    }
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": _throttle_cache,
    # An import's progress, which the page polls while the upload is processed: shared by every
    # web process in real mode (Redis), in-process in embedded mode (one process).
    "progress": {**_throttle_cache, "KEY_PREFIX": "progress"},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "chat-platform API",
    "DESCRIPTION": "Bots, sessions, messages, compaction and memory.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI assets are served from this server, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Three "kind" choice sets (messages, memory records, connections): each enum named by model.
    "ENUM_NAME_OVERRIDES": {
        "MessageKindEnum": "bots.models.Message.Kind",
        "RecordKindEnum": "memory.models.MemoryRecord.Kind",
        "ConnectionKindEnum": "connections.models.Connection.Kind",
    },
}

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
CELERY_TASK_ROUTES = {
    "bots.tasks.*": {"queue": "chat"},
    "compaction.tasks.*": {"queue": "compaction"},
    # Parsing what users upload (a PDF's text, an import file): its own queue, so a slow or
    # hostile file never delays a reply or a summary (docs/security.md, "Heavy work").
    "attachments.tasks.extract": {"queue": "heavy"},
    "transfer.tasks.*": {"queue": "heavy"},
    # Embedding compacted messages (memory.embeddings) is compaction's follow-up work.
    "memory.tasks.*": {"queue": "compaction"},
}
CELERY_TASK_DEFAULT_QUEUE = "chat"
CELERY_BEAT_SCHEDULE = {
    "sweep-orphans": {"task": "bots.tasks.sweep_orphans", "schedule": 60.0},
    "sweep-unsent-attachments": {
        "task": "attachments.tasks.sweep_unsent",
        "schedule": ATTACHMENT_SWEEP_SECONDS,
    },
}
CELERY_TIMEZONE = TIME_ZONE

# --- Channels ---------------------------------------------------------------------------------
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
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

# --- Models and context ---------------------------------------------------------------------
CONTEXT_ABSOLUTE_CAP_TOKENS = env.int("CONTEXT_ABSOLUTE_CAP_TOKENS", default=200_000)
if CONTEXT_ABSOLUTE_CAP_TOKENS < 1:
    raise ImproperlyConfigured("CONTEXT_ABSOLUTE_CAP_TOKENS must be a positive integer")
# Which environment variables a bot may name as api_key_env, and which base URLs bots of
# non-staff users may call (see chat_platform/provider_policy.py). The allow-list is checked
# against every setting name at the end of this module.
PROVIDER_KEY_ENV_ALLOWED = env.list(
    "PROVIDER_KEY_ENV_ALLOWED", default=list(provider_policy.DEFAULT_PROVIDER_KEY_ENVS)
)
PROVIDER_API_BASES = env.list("PROVIDER_API_BASES", default=[])
_bad_bases = [url for url in PROVIDER_API_BASES if not provider_policy.api_base_is_http(url)]
if _bad_bases:
    raise ImproperlyConfigured(
        f"PROVIDER_API_BASES: not plain http(s) URLs: {', '.join(_bad_bases)}"
    )
# Provider connections (app ``connections``): the secret their stored keys are encrypted with
# (≥ 32 characters; comma-separated values rotate: the first encrypts, all decrypt). Unset:
# keys cannot be stored; start-up fails if encrypted keys exist (connections/checks.py).
CONNECTION_ENCRYPTION_KEY = env.str("CONNECTION_ENCRYPTION_KEY", default="")
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=120.0)
LLM_MAX_RETRIES = env.int("LLM_MAX_RETRIES", default=2)
LLM_RETRY_BACKOFF_SECONDS = env.float("LLM_RETRY_BACKOFF_SECONDS", default=1.0)
# Streamed calls to OpenAI-compatible servers (openai/<model> with an api_base) are read directly
# (chat_platform/llm/openai_compat.py) instead of through litellm's stream wrapper.
LLM_DIRECT_OPENAI_COMPATIBLE = env.bool("LLM_DIRECT_OPENAI_COMPATIBLE", default=True)
# Deltas are sent to the channel layer in small batches, at most this often.
CHAT_STREAM_FLUSH_SECONDS = env.float("CHAT_STREAM_FLUSH_SECONDS", default=0.05)
# Turns stuck in pending/streaming for longer than this are marked interrupted by the sweep.
CHAT_ORPHAN_AFTER_SECONDS = env.int("CHAT_ORPHAN_AFTER_SECONDS", default=600)
# The hand-written fast paths of the hot queries (chat_platform/dbwrite.py: UPDATE … RETURNING and
# the PostgreSQL CTEs that do a write and its reads in one statement; chat_platform/compiled.py:
# queries compiled once per process). false: the plain ORM does the same work in more round
# trips — the way to rule them out when something looks wrong, and what CI runs a turn through.
DB_FAST_PATHS = env.bool("DB_FAST_PATHS", default=True)
# A running turn stamps its reply's heartbeat this often; the watchdog (beat, every
# CHAT_WATCHDOG_SECONDS) marks a streaming reply whose heartbeat is older than
# CHAT_HEARTBEAT_TIMEOUT_SECONDS interrupted (its worker died), and hands pending replies that
# never reached the queue (broker down at send time) or were dispatched over
# CHAT_REDISPATCH_AFTER_SECONDS ago without starting (their task was lost) to the queue again.
# Worst case from a worker's death to the interrupted reply: timeout + watchdog interval.
CHAT_HEARTBEAT_SECONDS = env.float("CHAT_HEARTBEAT_SECONDS", default=5.0)
CHAT_HEARTBEAT_TIMEOUT_SECONDS = env.float("CHAT_HEARTBEAT_TIMEOUT_SECONDS", default=30.0)
CHAT_WATCHDOG_SECONDS = env.float("CHAT_WATCHDOG_SECONDS", default=10.0)
CHAT_REDISPATCH_AFTER_SECONDS = env.float("CHAT_REDISPATCH_AFTER_SECONDS", default=120.0)
if CHAT_HEARTBEAT_TIMEOUT_SECONDS < 3 * CHAT_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured(
        "CHAT_HEARTBEAT_TIMEOUT_SECONDS must be at least 3 x CHAT_HEARTBEAT_SECONDS"
    )
CELERY_BEAT_SCHEDULE["turns-watchdog"] = {
    "task": "bots.tasks.turns_watchdog",
    "schedule": CHAT_WATCHDOG_SECONDS,
}
# How long POST .../messages/ with wait=true waits for the reply.
CHAT_WAIT_TIMEOUT_SECONDS = env.float("CHAT_WAIT_TIMEOUT_SECONDS", default=120.0)
# Heavy requests (compaction, re-summarise, undo, model discovery, wait=true sends) one user may
# have running at once, over all processes; one more is refused with 429 rate_limited
# (chat_platform/heavy.py, docs/security.md).
HEAVY_REQUESTS_PER_USER = env.int("HEAVY_REQUESTS_PER_USER", default=8)
if HEAVY_REQUESTS_PER_USER < 1:
    raise ImproperlyConfigured("HEAVY_REQUESTS_PER_USER must be at least 1")

# --- Compaction ---------------------------------------------------------------------------
# The single-flight lease: extended by a heartbeat while a compaction runs, so it only expires
# when its holder died.
# Short, so a killed holder frees the session within this many seconds; the heartbeat extends
# it every third of its length while a live holder works.
COMPACTION_LOCK_LEASE_SECONDS = env.float("COMPACTION_LOCK_LEASE_SECONDS", default=15.0)
# How long a blocking (hard) or manual caller waits for a compaction already in flight.
COMPACTION_WAIT_SECONDS = env.float("COMPACTION_WAIT_SECONDS", default=60.0)
COMPACTION_COOLDOWN_SECONDS = env.int("COMPACTION_COOLDOWN_SECONDS", default=300)
COMPACTION_BACKOFF_SECONDS = env.list(
    "COMPACTION_BACKOFF_SECONDS", cast=int, default=[30, 60, 120, 240, 270]
)
# Soft compaction drains toward the target in at most this many passes.
COMPACTION_SOFT_PASSES = env.int("COMPACTION_SOFT_PASSES", default=3)
# Soft compaction on the queue yields to the session's replies: while one is running or queued
# (the next bot of a room's round, a message sent meanwhile), it is put back for this many
# seconds, at most COMPACTION_SOFT_YIELD_MAX times (then it runs anyway; the hard threshold
# guards the turn meanwhile). 0 times: never yield.
COMPACTION_SOFT_YIELD_SECONDS = env.float("COMPACTION_SOFT_YIELD_SECONDS", default=1.0)
COMPACTION_SOFT_YIELD_MAX = env.int("COMPACTION_SOFT_YIELD_MAX", default=30)
# Context records ("what the model saw", one per reply): deleted by a daily sweep once older
# than this many days; 0 keeps them all.
CONTEXT_RECORD_RETENTION_DAYS = env.int("CONTEXT_RECORD_RETENTION_DAYS", default=0)
if CONTEXT_RECORD_RETENTION_DAYS < 0:
    raise ImproperlyConfigured("CONTEXT_RECORD_RETENTION_DAYS must be 0 (keep all) or more.")
CELERY_BEAT_SCHEDULE["context-records-sweep"] = {
    "task": "compaction.tasks.context_records_sweep",
    "schedule": 3600.0,
}

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
