"""Celery tasks: thin interfaces (ids in, one service call, safe to run twice)."""

from celery import shared_task

from turns import turn, watchdog


@shared_task(name="bots.tasks.turn_run", ignore_result=True)
def turn_run(message_id: int) -> None:
    turn.turn_run(message_id=message_id)


@shared_task(name="bots.tasks.turns_watchdog", ignore_result=True)
def turns_watchdog() -> dict[str, int]:
    result = watchdog.turns_watchdog()
    return {"interrupted": result.interrupted, "dispatched": result.dispatched}


@shared_task(name="bots.tasks.sweep_orphans", ignore_result=True)
def sweep_orphans() -> int:
    return watchdog.messages_sweep_orphans()
