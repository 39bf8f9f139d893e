#!/usr/bin/env bash
# Install everything the tests need and run them: lint, migrations check, compose validation,
# then the whole pytest suite against real PostgreSQL and Redis. Fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."

# Phase times, printed at the end (and when a step fails): where the run's minutes went.
phases=()
phase_name=""
phase_start=$SECONDS
run_start=$SECONDS
phase() {
  if [ -n "$phase_name" ]; then phases+=("$(printf '%6ds  %s' $((SECONDS - phase_start)) "$phase_name")"); fi
  phase_name="$1"
  phase_start=$SECONDS
  [ -z "$1" ] || echo "== $1"
}
report_phases() {
  local status=$?
  phase ""
  echo "== phase times"
  printf '%s\n' "${phases[@]}"
  printf '%6ds  whole run (exit %d)\n' $((SECONDS - run_start)) "$status"
}
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
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'

phase "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
phase "mypy (typed modules listed in pyproject.toml)"
.venv/bin/mypy
phase "import contracts (docs/architecture.md)"
.venv/bin/lint-imports
phase "migrations are up to date"
DEBUG=true .venv/bin/python manage.py makemigrations --check --dry-run
phase "deploy checks with production settings"
env -u DATABASE_URL -u REDIS_URL DEBUG=false HTTPS=true ALLOWED_HOSTS=chat.example.com \
  SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https \
  SECRET_KEY="$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
  .venv/bin/python manage.py check --deploy --fail-level WARNING
phase "docker-compose.yml is valid"
docker-compose -f docker-compose.yml config -q
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
XDIST=(--dist loadfile --tx "popen//env:TEST_REDIS_DB=15" --tx "popen//env:TEST_REDIS_DB=10")
if [ $# -eq 0 ]; then
  # The browser tests drive Chromium through Playwright's sync API (greenlets and an event loop
  # of its own); they run in a process of their own, apart from the async/threaded suites.
  # --durations: the slowest tests are in the log, for whoever shortens the run next.
  # Two test processes (pytest-xdist), a module's tests on one of them (--dist loadfile: a
  # module's stack or server starts once); each has a test database of its own (pytest-django
  # names them test_test_gw0 / _gw1) and a Redis db of its own (TEST_REDIS_DB, pyproject.toml).
  phase "pytest (everything but the browser)"
  run_pytest -m "not browser" --durations=25 "${XDIST[@]}"
  phase "pytest (headless Chromium end-to-end)"
  run_pytest -m browser --durations=10 "${XDIST[@]}"
else
  phase "pytest $*"
  run_pytest "$@"
fi
# Only for the whole suite (arguments select tests: skip). No timing is asserted; a turn that
# failed, got stuck, was lost or sent its deltas twice fails the run.
if [ $# -eq 0 ] && [ -z "${SKIP_BENCH_SMOKE:-}" ]; then
  phase "bench smoke: the whole stack, a few turns and a burst of 20 sessions"
  # The two run side by side, each on a database and a Redis db of its own: both spend most of
  # their time waiting on the fake provider and the pacing, not on the CPU.
  smoke_db="${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/chat_bench_smoke}"
  smoke_redis="${BENCH_REDIS_URL:-redis://127.0.0.1:6379/14}"
  smoke_logs="$(mktemp -d)"
  DATABASE_URL="$smoke_db" REDIS_URL="$smoke_redis" \
    .venv/bin/python bench/turn_overhead.py --pairs 3 --warmup 1 --smoke \
    >"$smoke_logs/turns.log" 2>&1 &
  turns_pid=$!
  DATABASE_URL="${smoke_db}_burst" REDIS_URL="${smoke_redis%/*}/11" \
    .venv/bin/python bench/concurrent_sessions.py --quick --rate 10 --smoke \
    >"$smoke_logs/burst.log" 2>&1 &
  burst_pid=$!
  set +e
  wait "$turns_pid"
  turns_status=$?
  wait "$burst_pid"
  burst_status=$?
  set -e
  cat "$smoke_logs/turns.log" "$smoke_logs/burst.log"
  rm -rf "$smoke_logs"
  if [ $turns_status -ne 0 ] || [ $burst_status -ne 0 ]; then
    echo "bench smoke failed: turn_overhead exit $turns_status, concurrent_sessions exit $burst_status" >&2
    exit 1
  fi
fi
