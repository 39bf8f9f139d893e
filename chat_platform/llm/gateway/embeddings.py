"""Embeddings: one ``litellm.embedding`` call under the same policy, keys, outbound rules and
retries as a completion; a built-in model (``builtin/embed``) is called in-process, without
litellm (``_builtin_embedding``)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
import tenacity

from chat_platform import outbound
from chat_platform.llm.gateway import lazy_litellm
from chat_platform.llm.gateway.builtin_road import BuiltinModelNotFound
from chat_platform.llm.gateway.config import BUILTIN_PREFIX, ModelCallFailed, ModelConfig
from chat_platform.llm.gateway.errors import MODEL_CALL_RETRY, attempts_of, unavailable
from chat_platform.llm.gateway.request import call_kwargs, outbound_policy
from chat_platform.llm.gateway.results import field_of, log_failed, log_retry
from chat_platform.llm.tokens import count_tokens

log = structlog.get_logger("chat_platform.llm.gateway")


class EmbeddingUnreadable(Exception):
    """An embedding answer that is not one finite vector per input, all of one size."""


def _builtin_embedding(call: dict[str, Any]) -> dict[str, Any]:
    """The built-in embedding model, run in-process: the answer litellm's custom provider gives
    (``builtin.provider``), in OpenAI's shape, without litellm's per-call work (4 ms of CPU of
    the 21 a turn's two texts cost) or its import in a process that only embeds."""
    from chat_platform.llm import builtin

    try:
        vectors, tokens = builtin.embed(call["model"], call["input"])
    except builtin.UnknownBuiltinModel as exc:
        raise BuiltinModelNotFound(str(exc)) from exc
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": vector}
            for index, vector in enumerate(vectors)
        ],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _finite_numbers(vector: list[Any]) -> bool:
    """Every value a number (not a bool), finite and under 1e30 in size. A vector of plain
    floats, what every provider and the built-in model answer, is checked without a Python
    step per value (two vectors of 384 a turn)."""
    if set(map(type, vector)) == {float}:
        return all(map(math.isfinite, vector)) and max(map(abs, vector)) < 1e30
    return all(
        isinstance(x, int | float) and not isinstance(x, bool) and x == x and abs(x) < 1e30
        for x in vector
    )


def _embedding_vectors(response: Any, count: int) -> list[list[float]]:
    data = field_of(response, "data")
    if not isinstance(data, list) or len(data) != count:
        raise EmbeddingUnreadable(f"expected {count} embeddings")
    ordered: list[Any] = [None] * count
    for position, item in enumerate(data):
        index = field_of(item, "index")
        index = index if isinstance(index, int) and 0 <= index < count else position
        ordered[index] = field_of(item, "embedding")
    vectors: list[list[float]] = []
    for vector in ordered:
        if not isinstance(vector, list) or not vector:
            raise EmbeddingUnreadable("an embedding is not a list of numbers")
        if not _finite_numbers(vector):
            raise EmbeddingUnreadable("an embedding holds a value that is not a finite number")
        vectors.append(list(map(float, vector)))
    if len({len(v) for v in vectors}) != 1:
        raise EmbeddingUnreadable("the embeddings differ in size")
    return vectors


def embedding_tokens(config: ModelConfig, texts: list[str]) -> int:
    """What an embedding call of ``texts`` sends, counted as the provider would bill it."""
    return sum(count_tokens(text, model=config.model) for text in texts)


def embed(
    config: ModelConfig,
    texts: list[str],
    *,
    retry: bool = True,
    on_usage: Callable[[int], None] | None = None,
) -> list[list[float]]:
    """One embedding call (``litellm.embedding``; a built-in model in-process) for ``texts``,
    under the same provider policy, keys, outbound rules and retry policy as a completion
    (``retry=False``: one attempt, for a caller that has a fallback and must not wait); one
    vector per text, in order. Raises
    ``ModelCallFailed`` (an answer that is not one finite vector per text, all of one size,
    included: "the provider's answer could not be read").

    ``on_usage``: told the tokens the call cost once the provider answered (its reported
    ``usage``, else the inputs counted), for the caller to charge (connections.usage)."""
    started = time.monotonic()
    kwargs: dict[str, Any] = {}
    try:
        kwargs = call_kwargs(config, [], tools=None, max_tokens=None, stream=False)
    except ModelCallFailed as error:
        log_failed(config, error, started=started, streamed=False)
        raise
    if not texts:
        return []
    call: dict[str, Any] = {
        "model": config.model,
        "input": list(texts),
        "timeout": kwargs["timeout"],
        # Our retry policy only (see DEFAULT_MAX_RETRIES in LEAN_SWITCHES).
        "num_retries": 0,
        "max_retries": 0,
        "drop_params": True,
    }
    for name in ("api_base", "api_key"):
        if name in kwargs:
            call[name] = kwargs[name]
    in_process = config.model.startswith(BUILTIN_PREFIX)
    policy = outbound_policy(config, kwargs)
    state: tenacity.RetryCallState | None = None
    try:
        retrying = MODEL_CALL_RETRY.attempts(
            may_retry=lambda: retry, on_retry=partial(log_retry, config)
        )
        for attempt in retrying:
            state = attempt.retry_state
            with attempt, outbound.scope(policy):
                if in_process:
                    response = _builtin_embedding(call)
                else:
                    response = lazy_litellm.get().embedding(**call)
        if on_usage is not None:
            reported = field_of(field_of(response, "usage"), "prompt_tokens")
            on_usage(int(reported) if reported else embedding_tokens(config, texts))
        vectors = _embedding_vectors(response, len(texts))
    except EmbeddingUnreadable as exc:
        failure = ModelCallFailed(
            f"{config.model}: the provider's answer could not be read ({exc})",
            attempts=attempts_of(state),
        )
        log_failed(config, failure, started=started, streamed=False)
        raise failure from exc
    except Exception as exc:
        failure = unavailable(config, exc, attempts=attempts_of(state), kwargs=kwargs)
        log_failed(config, failure, started=started, streamed=False)
        raise failure from exc
    log.info(
        "llm_embedding",
        model=config.model,
        inputs=len(texts),
        dimensions=len(vectors[0]),
        attempts=attempts_of(state),
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    return vectors
