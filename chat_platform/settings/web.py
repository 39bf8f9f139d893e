"""Requests: message, attachment and import limits, the REST framework, sign-in throttling,
the caches, the API schema."""

from django.core.exceptions import ImproperlyConfigured

from chat_platform.settings.core import REDIS_URL, env

# Content over 1 MB is refused with payload_too_large by the service; the request itself may be a
# little larger than that (JSON escaping), so Django's own cap sits above it.
MESSAGE_MAX_BYTES = 1024 * 1024
# The tokens one search_records result (and one records-API ?q= answer) fills; a turn never
# gives it more than what is left of its budget B (docs/memory.md).
SEARCH_RESULT_TOKENS = env.int("SEARCH_RESULT_TOKENS", default=2000)
# Set above SEARCH_RESULT_TOKENS, a recall search whose request has room for more fills half of
# what is left of B, up to this; by default it is SEARCH_RESULT_TOKENS, the most any search
# fills (docs/memory.md, "Budget").
SEARCH_RESULT_TOKENS_MAX = env.int("SEARCH_RESULT_TOKENS_MAX", default=SEARCH_RESULT_TOKENS)
# Each embedding call (a bot's embedding_model: messages after a compaction, a question when it
# searches) waits at most this long; a search whose call fails goes on with word search alone.
EMBEDDING_TIMEOUT_SECONDS = env.float("EMBEDDING_TIMEOUT_SECONDS", default=10.0)
if EMBEDDING_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfigured("EMBEDDING_TIMEOUT_SECONDS must be more than 0")
# Turns first: a process embeds the messages its turns wrote once no turn runs in it, or once
# they have waited this long (docs/performance.md "Turns first"); 0 embeds them at once.
EMBED_DEFER_MAX_SECONDS = env.float("EMBED_DEFER_MAX_SECONDS", default=30.0)
if EMBED_DEFER_MAX_SECONDS < 0:
    raise ImproperlyConfigured("EMBED_DEFER_MAX_SECONDS must be 0 or more")
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

# The child process an import job runs in (queue "heavy", docs/transfer.md "Import jobs"): wall
# clock seconds (CPU one more) and address space. The child loads Django and the project (about
# 180 MB of address space) before it reads a byte; a conversation is built whole, at several
# times its size in the file.
IMPORT_RUN_SECONDS = env.float("IMPORT_RUN_SECONDS", default=900.0)
IMPORT_RUN_MEMORY_BYTES = env.int("IMPORT_RUN_MEMORY_BYTES", default=2 * 1024**3)
# The import-job sweep (beat, every 5 minutes): a job still queued this long after its upload
# never reached a worker (its task was lost) and ends failed; ended jobs are deleted this many
# days after they ended (docs/transfer.md, "Import jobs").
IMPORT_JOB_LOST_AFTER_SECONDS = env.float("IMPORT_JOB_LOST_AFTER_SECONDS", default=3600.0)
IMPORT_JOB_KEEP_DAYS = env.int("IMPORT_JOB_KEEP_DAYS", default=7)
if IMPORT_JOB_KEEP_DAYS < 1:
    raise ImproperlyConfigured("IMPORT_JOB_KEEP_DAYS must be at least 1")
ATTACHMENT_PDF_MAX_DECODED_BYTES = env.int(
    "ATTACHMENT_PDF_MAX_DECODED_BYTES", default=20 * 1024 * 1024
)
ATTACHMENT_IMAGE_TOKENS = env.int("ATTACHMENT_IMAGE_TOKENS", default=1000)
# An attached image is shown in the transcript (GET /api/v1/attachments/{id}/thumbnail/: the
# original, sized by the page) only within these: its header's width x height, never decoded
# on the server, and its bytes (docs/attachments.md "Thumbnails"). Larger ones stay a link.
ATTACHMENT_THUMBNAIL_MAX_PIXELS = env.int("ATTACHMENT_THUMBNAIL_MAX_PIXELS", default=25_000_000)
ATTACHMENT_THUMBNAIL_MAX_BYTES = env.int("ATTACHMENT_THUMBNAIL_MAX_BYTES", default=5 * 1024 * 1024)
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
    # Django's own cache, which allauth uses for its rate limits and to mark a TOTP code used:
    # shared by every web process in real mode, or a code used on one could be replayed on
    # another (docs/accounts.md).
    "default": (
        {**_throttle_cache, "KEY_PREFIX": "default"}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    ),
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
