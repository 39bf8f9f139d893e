#!/usr/bin/env bash
# Celery worker fleet for one machine: WORKER_PROCESSES processes (default: one per core), each a
# thread pool of CELERY_WORKER_CONCURRENCY threads (default 16).
#
# Why not one process with many threads: a turn waits on its provider most of the time, which
# threads do well, but its CPU (litellm's chunk parsing, JSON, the ORM) holds the GIL, so one
# process uses one core however many threads it has. Why not prefork: each child is one turn at
# a time. Several processes each with a thread pool use every core and serve
# processes x threads turns at once.
#
#   WORKER_QUEUES=chat,compaction (default) | chat | compaction   (separate fleets under load)
#   DATABASE_POOL_MAX_SIZE defaults to 2 x threads + 2 per process: a streaming turn may hold a
#   connection while its heartbeat/stop watcher uses another (docs/operations.md, budgets).
#
# SIGTERM/SIGINT are passed to every process (warm shutdown); the script exits when all have.
set -euo pipefail
cd "$(dirname "$0")/.."

processes="${WORKER_PROCESSES:-$(nproc 2>/dev/null || echo 1)}"
threads="${CELERY_WORKER_CONCURRENCY:-16}"
queues="${WORKER_QUEUES:-chat,compaction}"
export CELERY_WORKER_CONCURRENCY="$threads"
export DATABASE_POOL_MAX_SIZE="${DATABASE_POOL_MAX_SIZE:-$((2 * threads + 2))}"
celery="${CELERY:-celery}"
if [ -x .venv/bin/celery ] && [ -z "${CELERY:-}" ]; then celery=.venv/bin/celery; fi

pids=()
stop() { kill -TERM "${pids[@]}" 2>/dev/null || true; }
trap stop TERM INT
for i in $(seq 1 "$processes"); do
  # -q: no banner, every line is a JSON log event. Distinct node names, one per process.
  "$celery" -A chat_platform -q worker -Q "$queues" -P threads -c "$threads" \
    -n "w${i}-${queues//,/-}@%h" -l "${CELERY_LOG_LEVEL:-INFO}" "$@" &
  pids+=($!)
done
# The first process to end (or a signal) ends them all: a supervisor (compose's restart policy,
# systemd) then restarts the fleet, rather than leaving it a process short.
status=0
wait -n || status=$?
stop
for pid in "${pids[@]}"; do
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
done
exit $status
