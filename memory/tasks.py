"""Celery tasks of the memory app (queue ``compaction``): thin, safe to run twice."""

from celery import shared_task

from memory import embeddings, query_embedding


@shared_task(name=embeddings.EMBED_TASK, ignore_result=True)
def messages_embed(session_id: int, message_ids: list[int] | None = None) -> None:
    embeddings.messages_embed_pending(session_id=session_id, message_ids=message_ids)


@shared_task(name=query_embedding.QUERY_TASK)
def query_embed(bot_id: int, text: str, user_id: int) -> list[float] | None:
    """A web process's search question embedded here (queue ``chat``: it waits for the answer)."""
    return query_embedding.query_values(bot_id=bot_id, text=text, user_id=user_id)
