"""Search by meaning: message embeddings, and the vector side of hybrid search (docs/memory.md).

A bot's ``embedding_model`` (``builtin/embed`` by default: the built-in model, run in-process on
the CPU, docs/models.md; or any litellm embedding model, called with the bot's provider
settings like its chat model — both through the one gateway) has its messages embedded, and
``memory.queries.records_search`` then fuses two rankings of the same messages — the lexical one
(BM25 over ``MessageIndex`` terms) and this one (cosine similarity between the question's vector
and each message's in its thread: its own plus a share of the nearest messages of the same side
before and after it, ``NEIGHBOUR_WEIGHT``) — by reciprocal rank fusion, in which only the
lexical ranking's head votes (``LEXICAL_CANDIDATES``). A blank ``embedding_model``: words only.

Writing. Messages are embedded as they are written, live and compacted alike: when a turn (or an
import) indexes the messages it wrote (``memory.services.messages_index_written``), and when a
compaction indexes its range, ``messages_embed_dispatch`` hands the session (and, for written
messages, their ids) to the ``compaction`` queue (``memory.tasks``; in-process in embedded
mode) after commit, to wait for the process's turns (``memory.embed_after_turns``). It
embeds, in batches of ``EMBED_BATCH``, the indexed messages whose vector is missing or was
made by another model (a changed model re-embeds). A failed batch (timeout, 5xx, an
unreadable answer) is logged as a warning and ends the run: its rows stay pending and the
next compaction of the session takes them again: nothing is lost, and the turn or the
compaction never fails over it. A compaction taking a live message keeps its vector.

Storage. No ``vector`` extension is required: a vector is stored beside its message
(``MessageIndex.embedding``, little-endian float32, unit length) with the model that made it.
Ranking reads the vectors of the session in scope (the newest ``VECTOR_SCAN_MAX`` at most) in
chunks of ``VECTOR_CHUNK`` rows and keeps the best ``VECTOR_CANDIDATES`` (numpy: one matrix
product per chunk), so memory stays bounded by a chunk whatever the session's length; the cost
is linear in the session's messages (``bench/memory_search.py`` prints it at 10k and 100k).
On PostgreSQL what was read and smoothed is kept per process while its rows are unchanged
(``memory.vector_cache``): a session searched again costs a version check, not a read.
Both databases run the same Python, so SQLite ranks what PostgreSQL ranks.

Reading. The question is embedded with the same model when the search runs. An outage there
(or a model that answers garbage) degrades the search to lexical only, with a logged warning:
a turn never fails because embeddings are down.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Q

from bots.model_config import bot_model_config
from bots.models import Bot, ChatSession
from chat_platform import foreground
from chat_platform.celery_app import task_named
from chat_platform.compiled import CompiledValues
from chat_platform.dbwrite import rows_update
from chat_platform.errors import QuotaExceeded
from chat_platform.llm import gateway
from connections import usage

if TYPE_CHECKING:
    import numpy as np
from chat_platform.outage import BROKER_ERRORS
from memory import vector_cache
from memory.models import MessageIndex
from memory.search import MessageScore

log = structlog.get_logger(__name__)

EMBED_TASK = "memory.tasks.messages_embed"
# Texts per embedding request, requests per run (the session's next run goes on from there).
EMBED_BATCH = 64
EMBED_MAX_BATCHES = 50
# What of a message is embedded: embedding models read a few hundred tokens at most.
EMBED_TEXT_MAX_CHARS = 2000
# The limits of the API key whose action wrote the messages, as a task carries them
# (``usage.scope_pairs``); None: the user's own alone.
Quota = list[list[Any]] | None
# The vector side of a search: the best this many messages take part in the fusion, out of the
# newest VECTOR_SCAN_MAX vectors of the session, read VECTOR_CHUNK rows at a time. Past the
# fused head the fill goes on with the lexical tail (messages sharing one word, often a
# speaker's name): the next messages by meaning are better evidence, so 200, not 100
# (docs/performance.md, "Recall: more turns in the same budget").
VECTOR_CANDIDATES = 200
VECTOR_SCAN_MAX = 100_000
VECTOR_CHUNK = 4096
# A message takes part only when it is at least this share as similar as the best one (and more
# than orthogonal): what is far from the question in meaning is not a hit, however few hits the
# question has. Relative, so it holds for any model's scale of similarities.
VECTOR_MIN_SHARE = 0.5
# A message is ranked by its vector in its thread: its own plus NEIGHBOUR_WEIGHT of each of the
# two nearest compacted messages of the same side (the one before and the one after it said by
# the same role and, in a room, the same bot), unit length again. A turn alone often does not
# say what it is about ("Finished it on the train home, the ending wrecked me" is about the book
# named two messages earlier), and one side's consecutive messages carry its thread; the other
# side's replies in between ("Noted.", or a bot quoting what it found) are ranked on their own
# and never water a message down. The share is small enough that a message still ranks first
# by what it says itself.
NEIGHBOUR_WEIGHT = 0.35


# --- vectors as bytes -------------------------------------------------------------------------


def vector_bytes(vector: list[float] | np.ndarray) -> bytes:
    """A vector as stored: float32, little-endian, unit length (a zero vector stays zero)."""
    import numpy as np  # only where vectors are used: Django's start-up never loads numpy

    array = np.asarray(vector, dtype="<f4")
    norm = float(np.linalg.norm(array))
    if norm > 0:
        array = array / norm
    return array.astype("<f4").tobytes()


def vector_array(data: bytes | memoryview) -> np.ndarray:
    import numpy as np  # only where vectors are used: Django's start-up never loads numpy

    return np.frombuffer(bytes(data), dtype="<f4")


# --- the model ---------------------------------------------------------------------------------


def _builtin_config(model: str) -> gateway.ModelConfig:
    return gateway.ModelConfig(model=model, timeout=float(settings.EMBEDDING_TIMEOUT_SECONDS))


# Compiled once (chat_platform/compiled.py): the session and bot as models cost ~3 ms a turn.
_SESSION_EMBEDDER = CompiledValues(
    lambda session_id: ChatSession.objects.filter(pk=session_id).values_list(
        "user_id", "bot_id", "bot__embedding_model"
    )
)


def embedding_config(bot: Bot) -> gateway.ModelConfig:
    """The bot's embedding model as the gateway is given it: the bot's provider settings (its
    connection, or its api_base and key variable), the embedding call's own timeout. The
    built-in model runs here: no provider settings."""
    if bot.embedding_model.startswith(gateway.BUILTIN_PREFIX):
        return _builtin_config(bot.embedding_model)
    config = bot_model_config(bot, model=bot.embedding_model)
    return replace(config, timeout=float(settings.EMBEDDING_TIMEOUT_SECONDS))


def embed_texts(bot: Bot, texts: list[str], *, user_id: int, retry: bool = True) -> list[bytes]:
    """``texts`` embedded by the bot's model, as stored bytes; raises ``ModelCallFailed``.

    Charged to ``user_id`` (the session's user) and the scope's API key like any provider call:
    ``QuotaExceeded`` and no call when the inputs do not fit in what is left today
    (docs/connections.md "Daily token limits"). The built-in model is no provider call: it runs
    on this machine, costs no one tokens, and is never charged."""
    return _embed(embedding_config(bot), texts, user_id, retry)


def _embed(config: gateway.ModelConfig, texts: list[str], user_id: int, retry: bool) -> list[bytes]:
    clipped = [text[:EMBED_TEXT_MAX_CHARS] for text in texts]
    if config.model.startswith(gateway.BUILTIN_PREFIX):
        return [vector_bytes(v) for v in gateway.embed(config, clipped, retry=retry)]
    sends = gateway.embedding_tokens(config, clipped)
    with usage.quota_charge(user_id=user_id, sends=sends, purpose="embedding") as meter:
        vectors = gateway.embed(config, clipped, retry=retry, on_usage=meter.add)
    return [vector_bytes(v) for v in vectors]


# --- writing: the compaction worker ------------------------------------------------------------


def _pending(session_id: int, model: str, message_ids: list[int] | None = None):  # noqa: ANN202
    """The session's indexed messages (live and compacted) without a vector of ``model``."""
    rows = MessageIndex.objects.filter(session_id=session_id)
    if message_ids is not None:
        rows = rows.filter(message_id__in=message_ids)
    return rows.exclude(embedding_model=model, embedding__isnull=False).order_by("seq")


def _pending_texts(*, session_id: int, model: str, count: int, limit: int, **ids: int) -> Any:
    """``limit`` of ``_pending``'s ids with their texts; ``count`` ids ``id0``…, or -1: all."""
    message_ids = None if count < 0 else [ids[f"id{k}"] for k in range(count)]
    return _pending(session_id, model, message_ids).values_list("message_id", "message__content")[
        :limit
    ]


# Compiled once per process and number of ids (chat_platform/compiled.py): a turn's embedding
# reads its question's and reply's texts every turn. More ids than 8 (an import's) are built.
_PENDING_TEXTS = CompiledValues(_pending_texts, shape=("count", "limit"))


def _pending_batch(session_id: int, model: str, message_ids: list[int] | None) -> dict[int, str]:
    ids = {f"id{k}": int(pk) for k, pk in enumerate(message_ids or ())}
    count = -1 if message_ids is None else len(ids)
    read: Any = _PENDING_TEXTS.rows if count == -1 or 0 < count <= 8 else _pending_texts
    return dict(read(session_id=session_id, model=model, count=count, limit=EMBED_BATCH, **ids))


def messages_embed_pending(
    *, session_id: int, message_ids: list[int] | None = None, quota: Quota = None
) -> int:
    """Embed the session's indexed messages (only ``message_ids`` of them, when given: a turn's
    just-written ones) that have no vector of its bot's embedding model yet, in batches; how
    many were embedded. A failed batch is logged (warning) and ends the run with its rows still
    pending, for the next compaction to take again; a vanished session or a bot without an
    embedding model embeds nothing. Charged to the session's user and to ``quota``, the limits
    of the API key whose action wrote the messages (``usage.scope_pairs``)."""
    user_id, bot_id, model = (_SESSION_EMBEDDER.rows(session_id=session_id) or [(0, 0, "")])[0]
    if not model:
        return 0
    with usage.quota_scope(extra=usage.limits_from_pairs(quota)):
        return _embed_pending(session_id, message_ids, user_id, bot_id, model)


def _embed_pending(
    session_id: int, message_ids: list[int] | None, user_id: int, bot_id: int, model: str
) -> int:
    builtin = model.startswith(gateway.BUILTIN_PREFIX)
    config = _builtin_config(model) if builtin else embedding_config(Bot.objects.get(pk=bot_id))
    done = 0
    for _ in range(EMBED_MAX_BATCHES):
        texts = {} if foreground.stopping() else _pending_batch(session_id, model, message_ids)
        if not texts:  # none left, or the process stops (the rest stays pending for later)
            break
        batch = list(texts)
        ids = [pk for pk in batch if (texts[pk] or "").strip()]
        try:
            vectors = _embed(config, [texts[pk] for pk in ids], user_id, True)
        except (gateway.ModelCallFailed, QuotaExceeded) as exc:
            left = _pending(session_id, model, message_ids).count()
            log.warning(
                "memory_embedding_failed",
                session_id=session_id,
                model=model,
                pending=left,
                reason=str(exc),
            )
            return done
        pairs = zip(ids, vectors, strict=True)
        rows = [MessageIndex(message_id=pk, embedding=v, embedding_model=model) for pk, v in pairs]
        rows_update(MessageIndex, rows, ("embedding", "embedding_model"))
        # A message whose text vanished meanwhile has nothing to embed: marked, never retried.
        embedded = set(ids)
        blank = [pk for pk in batch if pk not in embedded]
        if blank:
            MessageIndex.objects.filter(message_id__in=blank).update(
                embedding=b"", embedding_model=model
            )
        done += len(rows)
        if len(batch) < EMBED_BATCH:
            break  # that was all of them: no read to find none left
    if done:
        log.info("memory_embedded", session_id=session_id, model=model, messages=done)
    return done


def messages_embed_dispatch(
    session_id: int, message_ids: list[int] | None = None, quota: Quota = None
) -> None:
    """After a compaction, a turn or an import committed: embed the session's pending messages
    (``message_ids`` only, when given) on the ``compaction`` queue (at once, in embedded mode),
    charged to ``quota`` too (the API key's limits, ``usage.scope_pairs``). A broker that is
    down loses nothing: the rows stay pending for the next compaction of the session. Never
    raises (what called it has succeeded)."""
    try:
        task_named(EMBED_TASK).delay(session_id, message_ids, **({"quota": quota} if quota else {}))
    except BROKER_ERRORS:
        log.warning("memory_embedding_dispatch_failed", session_id=session_id, exc_info=True)
    except Exception:  # an eager run that failed unexpectedly: logged, never the compaction's
        log.exception("memory_embedding_run_failed", session_id=session_id)


# --- reading: the vector side of a search ------------------------------------------------------


def query_vector(bot: Bot, text: str, *, user_id: int) -> np.ndarray | None:
    """The question's vector, or ``None``: no embedding model, the model failed, or ``user_id``'s
    daily limit has no room for it (logged as a warning; the search goes on lexically)."""
    if not bot.embedding_model or not text.strip():
        return None
    try:
        # One attempt: a search waiting out retries would hold the turn; it has a fallback.
        (vector,) = embed_texts(bot, [text], user_id=user_id, retry=False)
    except (gateway.ModelCallFailed, QuotaExceeded) as exc:
        log.warning(
            "memory_search_embedding_failed",
            bot_id=bot.pk,
            model=bot.embedding_model,
            reason=str(exc),
            fallback="lexical",
        )
        return None
    return vector_array(vector)


# The session's vectors of one model and the query's size, newest first; every value a parameter.
# Compacted messages, and live ones below the given seq (``live_before``; 0: none), as the
# lexical ranking takes them (``memory.search.messages_ranked``).
_VECTORS_SQL = """
SELECT i.message_id, i.seq, i.record_id, i.embedding, m.role, m.bot_id{version}
FROM memory_messageindex i JOIN bots_message m ON m.id = i.message_id
WHERE {where}
ORDER BY i.seq DESC LIMIT %s
"""
_VECTORS_WHERE = """i.session_id = %s AND (i.record_id IS NOT NULL OR i.seq < %s)
  AND i.embedding_model = %s AND i.embedding IS NOT NULL AND length(i.embedding) = %s"""
# PostgreSQL: each row read also gives its version (the transaction that wrote it and where),
# and what a kept read came from is checked by the same selection without vectors or the join,
# as one fingerprint (``memory.vector_cache``).
_ROW_VERSION = ", i.xmin::text || ':' || i.ctid::text"
_VERSION_SQL = """
SELECT count(*), coalesce(md5(string_agg(v, ',' ORDER BY seq DESC)), '') FROM (
  SELECT i.seq, i.xmin::text || ':' || i.ctid::text AS v FROM memory_messageindex i
  WHERE {where} ORDER BY i.seq DESC LIMIT %s
) AS read
"""


def vector_ranked(
    *,
    session_id: int,
    model: str,
    query: np.ndarray,
    limit: int = VECTOR_CANDIDATES,
    live_before: int | None = None,
) -> list[MessageScore]:
    """The ``limit`` compacted messages of the session (and live ones of a seq below
    ``live_before``: ``record_id`` None) most similar to ``query`` (cosine of the question and
    the message in its thread, ``NEIGHBOUR_WEIGHT``; ties: newest first), out of its newest
    ``VECTOR_SCAN_MAX`` vectors of ``model``, leaving out those less than ``VECTOR_MIN_SHARE``
    as similar as the best. Vectors of another size than the query's (another model under the
    same name) are skipped."""
    if limit <= 0 or not query.size:
        return []
    query = query.astype("<f4")
    params = [session_id, live_before or 0, model, query.size * 4, VECTOR_SCAN_MAX]
    best: list[tuple[float, int, int, int]] = []  # (similarity, seq, message id, record id)
    try:
        for rows, matrix in _threaded(params, query.size):
            best = _best_of(best, rows, matrix, query, limit)
    except DatabaseError:
        log.warning("memory_vector_read_failed", session_id=session_id, exc_info=True)
        return []
    floor = max(0.0, best[0][0] * VECTOR_MIN_SHARE) if best else 0.0
    return [
        MessageScore(message_id=m, seq=s, record_id=r, score=sim, session_id=session_id)
        for sim, s, m, r in best
        if sim > 0 and sim >= floor
    ]


def vectors_exist(*, session_id: int, model: str, live_before: int | None = None) -> bool:
    """Whether ``vector_ranked`` has any vector of ``model`` to read in the session (compacted
    messages, and live ones below ``live_before``)."""
    rows = MessageIndex.objects.filter(session_id=session_id, embedding_model=model).exclude(
        embedding=None
    )
    live = Q(seq__lt=live_before) if live_before else Q(pk__in=[])
    return rows.filter(Q(record__isnull=False) | live).exists()


Row = tuple[int, int, int, bytes, str, int | None]  # message id, seq, record id, vector, role, bot


def _threaded(params: list[Any], size: int) -> Iterator[tuple[list[Row], np.ndarray]]:
    """``_in_thread`` of the rows ``params`` select. On PostgreSQL, kept per process while the
    rows' version holds (``memory.vector_cache``): one statement without vectors instead of the
    read, and no smoothing again."""
    if connection.vendor != "postgresql":
        yield from _in_thread(_vector_chunks(params), size)
        return
    key = (connection.settings_dict["NAME"], *params, size, NEIGHBOUR_WEIGHT, VECTOR_CHUNK)
    entry = vector_cache.cache.get(key)
    if entry is not None:
        with connection.cursor() as cursor:
            cursor.execute(_VERSION_SQL.format(where=_VECTORS_WHERE), params)
            count, fingerprint = cursor.fetchone()
        if (count, fingerprint) == entry.version:
            yield from entry.parts
            return
    parts, versions, nbytes = [], [], 0
    for rows, matrix in _in_thread(_vector_chunks(params), size):
        parts.append(([row[:3] for row in rows], matrix))
        versions += [(row[1], row[6]) for row in rows]
        nbytes += matrix.nbytes
        yield rows, matrix
    version = (len(versions), vector_cache.fingerprint(versions))
    vector_cache.cache.put(key, vector_cache.Entry(version, parts, nbytes))


def _vector_chunks(params: list[Any]) -> Iterator[list[Row]]:
    """The rows, newest first, ``VECTOR_CHUNK`` at a time. On PostgreSQL through a
    binary-result cursor on the same connection: a bytea in text form is twice the bytes, and
    decoding its hex costs more than the matrix product (Django's cursors bind client-side,
    which cannot return binary)."""
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        import psycopg

        with psycopg.Cursor(connection.connection) as cursor:
            sql = _VECTORS_SQL.format(version=_ROW_VERSION, where=_VECTORS_WHERE)
            cursor.execute(sql, params, binary=True)
            while rows := cursor.fetchmany(VECTOR_CHUNK):
                yield rows
        return
    with connection.cursor() as cursor:
        cursor.execute(_VECTORS_SQL.format(version="", where=_VECTORS_WHERE), params)
        while rows := cursor.fetchmany(VECTOR_CHUNK):
            yield rows


class _Side:
    """One side's messages as they stream by, newest first: each comes out with its vector
    in its thread once its older neighbour has been read (``NEIGHBOUR_WEIGHT``)."""

    def __init__(self, size: int) -> None:
        import numpy as np  # only where vectors are used: Django's start-up never loads numpy

        self.held: list[Row] = []  # at most one row: the last read, waiting for its older one
        self.held_vector = np.zeros((0, size), dtype="<f4")
        self.newer: np.ndarray | None = None  # the held row's newer neighbour

    def take(self, rows: list[Row], matrix: np.ndarray) -> tuple[list[Row], np.ndarray]:
        """``rows`` (this side's, in stream order) read: the rows now complete, smoothed."""
        import numpy as np  # only where vectors are used: Django's start-up never loads numpy

        rows = self.held + rows
        matrix = np.vstack([self.held_vector, matrix])
        out = _smoothed(matrix, self.newer)
        if len(rows) > 1:
            self.newer = matrix[-2]
        self.held, self.held_vector = rows[-1:], matrix[-1:]
        return rows[:-1], out[:-1]

    def rest(self) -> tuple[list[Row], np.ndarray]:
        """The stream's end: the held row, with its newer neighbour only."""
        if not self.held:
            return [], self.held_vector
        return self.held, _smoothed(self.held_vector, self.newer)


def _in_thread(chunks: Iterator[list[Row]], size: int) -> Iterator[tuple[list[Row], np.ndarray]]:
    """Each chunk's rows with their vectors in their thread: a row's vector plus
    ``NEIGHBOUR_WEIGHT`` of the vectors of the nearest rows of the same side (role and bot)
    before and after it in the whole newest-first stream, unit length. A side's last row of a
    chunk waits for the next chunk (its older neighbour may be there), so chunk boundaries
    change nothing; what is held stays one chunk and a row per side."""
    import numpy as np  # only where vectors are used: Django's start-up never loads numpy

    sides: dict[tuple[str, int | None], _Side] = {}
    for chunk in chunks:
        vectors = np.frombuffer(b"".join(bytes(row[3]) for row in chunk), dtype="<f4")
        matrix = vectors.reshape(len(chunk), size)
        of_side: dict[tuple[str, int | None], list[int]] = {}
        for index, row in enumerate(chunk):
            of_side.setdefault((row[4], row[5]), []).append(index)
        for key, indexes in of_side.items():
            side = sides.setdefault(key, _Side(size))
            rows, smoothed = side.take([chunk[i] for i in indexes], matrix[indexes])
            if rows:
                yield rows, smoothed
    for side in sides.values():
        rows, smoothed = side.rest()
        if rows:
            yield rows, smoothed


def _smoothed(matrix: np.ndarray, newer: np.ndarray | None) -> np.ndarray:
    """Rows of ``matrix`` (one side's, newest first) plus ``NEIGHBOUR_WEIGHT`` of the rows
    beside them, unit length; the first row's newer neighbour is ``newer`` (none at the
    stream's start). The last row gets no older neighbour here: the caller holds it back unless
    the stream has ended."""
    import numpy as np  # only where vectors are used: Django's start-up never loads numpy

    out = matrix.copy()
    out[1:] += NEIGHBOUR_WEIGHT * matrix[:-1]  # each row's newer neighbour
    out[:-1] += NEIGHBOUR_WEIGHT * matrix[1:]  # each row's older neighbour
    if newer is not None and len(out):
        out[0] += NEIGHBOUR_WEIGHT * newer
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def _best_of(
    best: list[tuple[float, int, int, int]],
    rows: list[Row],
    matrix: np.ndarray,
    query: np.ndarray,
    limit: int,
) -> list[tuple[float, int, int, int]]:
    """``best`` and these rows' best, the ``limit`` most similar, best first (ties: newest)."""
    if not rows:
        return best
    import numpy as np  # only where vectors are used: Django's start-up never loads numpy

    similarity = matrix @ query
    take = min(limit, len(rows))
    top = np.argpartition(-similarity, take - 1)[:take] if take < len(rows) else range(len(rows))
    for index in top:
        message_id, seq, record_id = rows[int(index)][:3]
        best.append((round(float(similarity[int(index)]), 6), seq, message_id, record_id))
    best.sort(key=lambda b: (-b[0], -b[1]))
    return best[:limit]
