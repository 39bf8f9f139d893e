"""The core settings: the environment reader, secrets and hosts, HTTPS, the content security
policy, the mode (``EMBEDDED``), apps, middleware, templates, the database, static files."""

import sys
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from chat_platform import content_security

# chat_platform/settings/core.py -> the repository
BASE_DIR = Path(__file__).resolve().parent.parent.parent


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
if SECRET_KEY == "change-me-to-a-long-random-string" and not DEBUG:  # noqa: S105
    # .env.example's public placeholder signs nothing a stranger could not forge.
    raise ImproperlyConfigured(
        "SECRET_KEY is still the placeholder of .env.example: set a long random one"
    )
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

# daphne makes `manage.py runserver` speak ASGI (websockets) in development. Its app imports
# Twisted, ~0.4-0.9 s of every process start, so only runserver installs it; the servers we run
# (uvicorn), the workers and every other command start without it (docs/dependencies.md).
RUNSERVER = len(sys.argv) > 1 and sys.argv[1] == "runserver"

INSTALLED_APPS = [
    *(["daphne"] if RUNSERVER else []),
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
    "tools",
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
    # A chunked JSON body under /api/ read and given its length (DRF reads by it).
    "chat_platform.api.ChunkedJsonBodyMiddleware",
    # Django's, but a POST, PATCH, PUT or DELETE under an API is never redirected to the path
    # with a slash (chat_platform/api.py).
    "chat_platform.api.ApiCommonMiddleware",
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
    # Each connection is checked (one empty query) before it is lent: one the server ended (a
    # restart, a failover, pg_terminate_backend) is replaced, not handed to a request or a turn
    # that then fails while PostgreSQL is up (tests/test_pool_health.py).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
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
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Parameters bound by the server, and a statement prepared on a connection once it has run
    # there DATABASE_PREPARE_THRESHOLD times (0: at its first run): PostgreSQL then parses a
    # turn's statements once per pooled connection instead of at every run, a third of its CPU
    # a turn (docs/performance.md "PostgreSQL's share of a turn"). The pool hands its idle
    # connections out in turn, so each is warmed on its own: prepared at the first run, a
    # statement is parsed once per connection ("Prepared from the first run"); one sent without
    # parameters (a script, DDL) never is (chat_platform/pgcursor.py). A pooler in front of
    # PostgreSQL that cannot keep prepared statements (PgBouncer in transaction mode before
    # 1.21) needs DATABASE_PREPARE_THRESHOLD=off. Django's own default is neither.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options.setdefault(
        "server_side_binding", env.bool("DATABASE_SERVER_SIDE_BINDING", default=True)
    )
    _threshold = env.str("DATABASE_PREPARE_THRESHOLD", default="0").strip().lower()
    if _threshold not in ("off", "none", ""):
        if not _threshold.isdigit():
            raise ImproperlyConfigured(
                "DATABASE_PREPARE_THRESHOLD: a whole number of runs (0 or more), or off"
            )
        _options.setdefault("prepare_threshold", int(_threshold))
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
