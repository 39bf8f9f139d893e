"""Celery tasks of the memory app (queue ``compaction``): thin, safe to run twice."""

from celery import shared_task

from memory import embeddings


@shared_task(name=embeddings.EMBED_TASK, ignore_result=True)
def messages_embed(session_id: int, message_ids: list[int] | None = None) -> None:
    embeddings.messages_embed_pending(session_id=session_id, message_ids=message_ids)
