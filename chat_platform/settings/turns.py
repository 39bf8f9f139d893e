"""Models and context (provider policy, timeouts, the watchdog, heavy requests) and compaction
(leases, cool-downs, soft passes, context records)."""

from django.core.exceptions import ImproperlyConfigured

from chat_platform import provider_policy
from chat_platform.settings.core import env
from chat_platform.settings.queues import CELERY_BEAT_SCHEDULE, upkeep_entry

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
CELERY_BEAT_SCHEDULE["turns-watchdog"] = upkeep_entry(
    "bots.tasks.turns_watchdog", CHAT_WATCHDOG_SECONDS
)
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
# Context records ("what the model saw", one per reply): deleted by an hourly sweep once older
# than this many days; 0 keeps them all.
CONTEXT_RECORD_RETENTION_DAYS = env.int("CONTEXT_RECORD_RETENTION_DAYS", default=0)
if CONTEXT_RECORD_RETENTION_DAYS < 0:
    raise ImproperlyConfigured("CONTEXT_RECORD_RETENTION_DAYS must be 0 (keep all) or more.")
CELERY_BEAT_SCHEDULE["context-records-sweep"] = upkeep_entry(
    "compaction.tasks.context_records_sweep", 3600.0
)


# --- Tools from MCP servers (app ``tools``, docs/tools.md) -------------------------------------
# Each call's deadline, the tool rounds of one reply (then the model must answer), the largest
# result sent whole (a longer one is stored as the info record ``tool_<seq>`` and the model gets
# its head), how long "Refresh tools" waits for a server, and the share of B (percent) a bot's
# tool schemas may take (refused at save).
TOOL_CALL_TIMEOUT_SECONDS = env.float("TOOL_CALL_TIMEOUT_SECONDS", default=60.0)
TOOL_MAX_ROUNDS = env.int("TOOL_MAX_ROUNDS", default=25)
# The calls one round runs (at once); the model's further calls of that round are answered unrun.
TOOL_CALLS_PER_ROUND = env.int("TOOL_CALLS_PER_ROUND", default=16)
TOOL_RESULT_MAX_TOKENS = env.int("TOOL_RESULT_MAX_TOKENS", default=4000)
TOOL_LIST_TIMEOUT_SECONDS = env.float("TOOL_LIST_TIMEOUT_SECONDS", default=15.0)
TOOL_SCHEMAS_MAX_PERCENT = env.int("TOOL_SCHEMAS_MAX_PERCENT", default=25)
if TOOL_CALL_TIMEOUT_SECONDS <= 0 or TOOL_LIST_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfigured(
        "TOOL_CALL_TIMEOUT_SECONDS and TOOL_LIST_TIMEOUT_SECONDS must be > 0"
    )
if TOOL_MAX_ROUNDS < 1 or TOOL_RESULT_MAX_TOKENS < 100:
    raise ImproperlyConfigured("TOOL_MAX_ROUNDS must be >= 1 and TOOL_RESULT_MAX_TOKENS >= 100")
if TOOL_CALLS_PER_ROUND < 1:
    raise ImproperlyConfigured("TOOL_CALLS_PER_ROUND must be >= 1")
if not 1 <= TOOL_SCHEMAS_MAX_PERCENT <= 90:
    raise ImproperlyConfigured("TOOL_SCHEMAS_MAX_PERCENT must be 1-90")
