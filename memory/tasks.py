"""Celery tasks of the memory app (queue ``compaction``): thin, safe to run twice."""

from celery import shared_task

from memory import embeddings


@shared_task(name=embeddings.EMBED_TASK, ignore_result=True)
def messages_embed(session_id: int) -> None:
    embeddings.messages_embed_pending(session_id=session_id)
