#!/usr/bin/env bash
# Install everything the tests need and run them: lint, migrations check, compose validation,
# then the whole pytest suite against real PostgreSQL and Redis. Fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on
# some CI images): the run starts over a hundred interpreters, and each pytest process rewrote the
# asserts of ~550 test modules from source again (~9 s of CPU each, 2 s from the cache).
unset PYTHONDONTWRITEBYTECODE

# Phase times, printed at the end (and when a step fails): where the run's minutes went, and
# the CPU seconds the phase's finished processes used (a side job's count in the phase that
# waits for it). CPU well under twice the wall time on 2 cores: the phase mostly waits.
phases=()
phase_name=""
phase_start=$SECONDS
run_start=$SECONDS
times_file="$(mktemp)"
children_cpu() {  # sets cpu: user + system seconds of every finished child so far
  times >"$times_file"  # in this shell: a $(times) subshell would count its own children
  cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$times_file")
}
cpu=0
children_cpu
phase_cpu=$cpu
phase() {
  children_cpu
  if [ -n "$phase_name" ]; then
    phases+=("$(printf '%6ds %6ds  %s' $((SECONDS - phase_start)) $((cpu - phase_cpu)) "$phase_name")")
  fi
  phase_name="$1"
  phase_start=$SECONDS
  phase_cpu=$cpu
  [ -z "$1" ] || echo "== $1"
}
report_phases() {
  local status=$?
  phase ""
  # A phase failed while a side job ran: stop it, and show what it had printed.
  local entry pid name log
  for entry in "${background[@]}"; do
    read -r pid name log <<<"$entry"
    kill "$pid" 2>/dev/null || true
    echo "== $name (stopped: the run failed before it was waited for)"
    tail -n 40 "$log" 2>/dev/null || true
  done
  echo "== phase times (wall, CPU)"
  printf '%s\n' "${phases[@]}"
  children_cpu
  printf '%6ds %6ds  whole run (exit %d)\n' $((SECONDS - run_start)) "$cpu" "$status"
  [ -z "${TEST_TEMPLATES_DIR:-}" ] || rm -rf "$TEST_TEMPLATES_DIR"
}
background=()  # "pid name log" of each side job (side_job below)
trap report_phases EXIT
phase "install (apt, services, venv)"

need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
command -v docker-compose >/dev/null || need_apt+=(docker-compose)
command -v make >/dev/null || need_apt+=(make)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "please install: ${need_apt[*]}" >&2; exit 1; fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
fi

bash scripts/services.sh

if [ ! -x .venv/bin/python ]; then
  python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
fi
bash scripts/install.sh .venv dev

# The static checks run beside the first pytest phase (they are a minute of one core; the
# suite waits on its servers, Chromium and the fake provider much of the time), the bench smoke
# beside the browser phase. Each writes a log of its own, printed when it is waited for; either
# failing fails the run.
checks() {
  set -e
  step() { echo "== $1 ($((SECONDS - checks_start))s in)"; }
  checks_start=$SECONDS
  step "ruff"
  .venv/bin/ruff check .
  .venv/bin/ruff format --check .
  step "mypy (typed modules listed in pyproject.toml)"
  .venv/bin/mypy
  step "import contracts (docs/architecture.md)"
  .venv/bin/lint-imports
  step "migrations are up to date"
  DEBUG=true .venv/bin/python manage.py makemigrations --check --dry-run
  step "deploy checks with production settings"
  env -u DATABASE_URL -u REDIS_URL DEBUG=false HTTPS=true ALLOWED_HOSTS=chat.example.com \
    SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https \
    SECRET_KEY="$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    .venv/bin/python manage.py check --deploy --fail-level WARNING
  step "docker-compose.yml is valid"
  docker-compose -f docker-compose.yml config -q
  step "checks done"
}
logs="$(mktemp -d)"
# The migrated SQLite templates the embedded platforms start from: made by the first pytest
# session of this run, copied by the browser session too (tests/integration/processes.py).
export TEST_TEMPLATES_DIR="$logs/templates"
mkdir -p "$TEST_TEMPLATES_DIR"
side_job() {  # side_job NAME FUNCTION: FUNCTION in the background, its output to NAME.log (no spaces)
  local name="$1"
  shift
  ( "$@" ) >"$logs/$name.log" 2>&1 &
  background+=("$! $name $logs/$name.log")
  echo "== started beside the suite: $name"
}
side_jobs_wait() {  # print each side job's log; fail if any failed
  local failed=0 entry pid name log status
  for entry in "${background[@]}"; do
    read -r pid name log <<<"$entry"
    set +e
    wait "$pid"
    status=$?
    set -e
    echo "== $name (exit $status)"
    cat "$log"
    [ "$status" -eq 0 ] || failed=1
  done
  background=()
  [ "$failed" -eq 0 ] || { echo "a side job failed (above)" >&2; exit 1; }
}
run_pytest() {
  set +e
  .venv/bin/pytest "$@"
  local status=$?
  set -e
  if [ $status -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
  fi
  [ $status -eq 0 ] || exit $status
}
# Test processes (pytest-xdist), each with a Redis db of its own: the suite uses about half of two
# cores in two processes (it waits on servers, workers, Chromium and the fake provider), so it
# runs in four (the browser tests in three: each process has its own platform and Chromium).
# The files go out longest first, as tests/file_times.json has them (tests/file_order.py), not
# reordered by their number of tests: the few-test files that start servers came last.
xdist() {  # xdist N: N processes on Redis dbs 15, 10, 13, 12 (not 14 and 11: the bench smoke's)
  local dbs=(15 10 13 12) i
  XDIST=(--dist loadfile --no-loadscope-reorder)
  for ((i = 0; i < $1; i++)); do XDIST+=(--tx "popen//env:TEST_REDIS_DB=${dbs[i]}"); done
}
# No timing is asserted in the smoke; a turn that failed, got stuck, was lost or sent its deltas
# twice fails it. The two benches run side by side, each on a database and a Redis db of its own:
# both spend most of their time waiting on the fake provider and the pacing, not on the CPU.
bench_smoke() {
  local smoke_db="${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/chat_bench_smoke}"
  local smoke_redis="${BENCH_REDIS_URL:-redis://127.0.0.1:6379/14}"
  DATABASE_URL="$smoke_db" REDIS_URL="$smoke_redis" \
    .venv/bin/python bench/turn_overhead.py --pairs 3 --warmup 1 --smoke \
    >"$logs/turns.log" 2>&1 &
  local turns_pid=$!
  DATABASE_URL="${smoke_db}_burst" REDIS_URL="${smoke_redis%/*}/11" \
    .venv/bin/python bench/concurrent_sessions.py --quick --rate 10 --smoke \
    >"$logs/burst.log" 2>&1 &
  local burst_pid=$!
  local turns_status=0 burst_status=0
  wait "$turns_pid" || turns_status=$?
  wait "$burst_pid" || burst_status=$?
  cat "$logs/turns.log" "$logs/burst.log"
  if [ $turns_status -ne 0 ] || [ $burst_status -ne 0 ]; then
    echo "bench smoke failed: turn_overhead exit $turns_status, concurrent_sessions exit $burst_status" >&2
    return 1
  fi
}
if [ $# -eq 0 ]; then
  # The browser tests drive Chromium through Playwright's sync API (greenlets and an event loop
  # of its own); they run in a process of their own, apart from the async/threaded suites.
  # --durations: the slowest tests are in the log, for whoever shortens the run next.
  # A module's tests run in one test process (--dist loadfile: a module's stack or server
  # starts once); each process has a test database of its own (pytest-django names them
  # test_test_gw0, _gw1, …) and a Redis db of its own (TEST_REDIS_DB, pyproject.toml).
  side_job static-checks checks
  phase "pytest (everything but the browser), the static checks beside it"
  xdist 4
  run_pytest -m "not browser" --durations=25 "${XDIST[@]}"
  phase "the static checks' end"
  side_jobs_wait
  if [ -z "${SKIP_BENCH_SMOKE:-}" ]; then
    side_job bench-smoke bench_smoke  # the whole stack: a few turns, a burst of 20 sessions
  fi
  phase "pytest (headless Chromium end-to-end), the bench smoke beside it"
  xdist 3
  run_pytest -m browser --durations=10 "${XDIST[@]}"
  phase "the bench smoke's end"
  side_jobs_wait
else
  phase "static checks"
  checks
  phase "pytest $*"
  run_pytest "$@"
fi
