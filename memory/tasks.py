"""Celery tasks of the memory app (queue ``compaction``): thin, safe to run twice."""

from celery import shared_task

from memory import embed_after_turns, embeddings, query_embedding


@shared_task(bind=True, name=embeddings.EMBED_TASK, ignore_result=True)
def messages_embed(  # noqa: ANN001
    self, session_id: int, message_ids: list[int] | None = None, quota: embeddings.Quota = None
) -> None:
    if self.app.conf.task_always_eager:
        # Tests run tasks inline, inside the turn that dispatched this: it cannot wait for it.
        embeddings.messages_embed_pending(
            session_id=session_id, message_ids=message_ids, quota=quota
        )
    else:
        embed_after_turns.messages_embed_after_turns(
            session_id=session_id, message_ids=message_ids, quota=quota
        )


@shared_task(name=query_embedding.QUERY_TASK)
def query_embed(
    bot_id: int, text: str, user_id: int, quota: embeddings.Quota = None
) -> list[float] | None:
    """A web process's search question embedded here (queue ``chat``: it waits for the answer)."""
    return query_embedding.query_values(bot_id=bot_id, text=text, user_id=user_id, quota=quota)
