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
#   WORKER_QUEUES=chat,compaction,heavy,upkeep (default) | chat | compaction | heavy   (separate fleets
#   under load). "heavy": parsing uploads (a PDF's text, later imports), each in a limited child
#   process (chat_platform/sandbox.py), so a hostile file ends only that child.
#   DATABASE_POOL_MAX_SIZE defaults to 2 x threads + 2 per process: a streaming turn may hold a
#   connection while its heartbeat/stop watcher uses another (docs/operations.md, budgets).
#
# Supervision: a process that exits without being asked to (a crash, an "Unrecoverable error",
# the OOM killer) is started again in its slot after a back-off (1, 2, 4 ... at most
# WORKER_RESTART_MAX_DELAY seconds, default 30; back to 1 s once it has run a minute), so the
# fleet is never left a process short; each exit and restart is one JSON line on stderr.
# SIGTERM/SIGINT are passed to every process (warm shutdown); the script waits for all of them
# and exits 0 (a requested stop). A process still stopping WORKER_STOP_TIMEOUT_SECONDS (default
# 120) later is told to stop at once (SIGQUIT, Celery's cold shutdown), then killed 10 s after:
# a warm shutdown that hangs never holds the stop forever; a turn it cuts short is ended by the
# watchdog as after a crash. compose's restart policy or systemd restarts the script itself.
set -uo pipefail
cd "$(dirname "$0")/.."

processes="${WORKER_PROCESSES:-$(nproc 2>/dev/null || echo 1)}"
threads="${CELERY_WORKER_CONCURRENCY:-16}"
# "upkeep" (the watchdog, the sweeps) is the beat process's own lane (make beat); a fleet that
# serves every queue takes it too when a thread is free, so a beat started without its lane
# (`celery beat` alone) still has its watchdog run.
queues="${WORKER_QUEUES:-chat,compaction,heavy,upkeep}"
max_delay="${WORKER_RESTART_MAX_DELAY:-30}"
stop_timeout="${WORKER_STOP_TIMEOUT_SECONDS:-120}"
export CELERY_WORKER_CONCURRENCY="$threads"
export DATABASE_POOL_MAX_SIZE="${DATABASE_POOL_MAX_SIZE:-$((2 * threads + 2))}"
celery="${CELERY:-celery}"
if [ -x .venv/bin/celery ] && [ -z "${CELERY:-}" ]; then celery=.venv/bin/celery; fi

declare -A pids=() started=() failures=()
stopping=0
napping=""

say() {  # one JSON log line, as the Celery processes write them
  printf '{"event": "%s", "level": "%s", "logger": "scripts.worker", %s}\n' "$1" "$2" "$3" >&2
}

stop() {
  stopping=1
  if [ -n "$napping" ]; then kill -TERM "$napping" 2>/dev/null || true; fi
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
}
trap stop TERM INT

start() {
  local i=$1
  shift
  # -q: no banner, every line is a JSON log event. Distinct node names, one per process.
  "$celery" -A chat_platform -q worker -Q "$queues" -P threads -c "$threads" \
    -n "w${i}-${queues//,/-}@%h" -l "${CELERY_LOG_LEVEL:-INFO}" "$@" &
  pids[$i]=$!
  started[$i]=$SECONDS
}

for i in $(seq 1 "$processes"); do
  failures[$i]=0
  start "$i" "$@"
done

while [ "$stopping" -eq 0 ]; do
  wait -n  # a process ended, or a signal arrived (the trap has run)
  [ "$stopping" -eq 0 ] || break
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    status=$?
    if [ $((SECONDS - started[$i])) -ge 60 ]; then failures[$i]=0; fi
    delay=$((1 << failures[$i]))
    if [ "$delay" -gt "$max_delay" ]; then delay=$max_delay; else failures[$i]=$((failures[$i] + 1)); fi
    say worker_process_exited warning "\"process\": \"w$i\", \"status\": $status, \"restart_in_seconds\": $delay"
    sleep "$delay" &
    napping=$!
    wait "$napping" 2>/dev/null
    napping=""
    [ "$stopping" -eq 0 ] || break 2
    start "$i" "$@"
    say worker_process_restarted info "\"process\": \"w$i\""
  done
done

stop
# The stop's bound, beside the waits below (which reap the processes as they exit).
(
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  sleep "$stop_timeout" &
  nap=$!
  wait "$nap"
  say worker_stop_timeout warning "\"after_seconds\": $stop_timeout, \"signal\": \"QUIT\""
  for pid in "${pids[@]}"; do kill -QUIT "$pid" 2>/dev/null || true; done
  sleep 10 &
  nap=$!
  wait "$nap"
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
) &
bound=$!
for pid in "${pids[@]}"; do
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done
done
kill "$bound" 2>/dev/null || true
exit 0
