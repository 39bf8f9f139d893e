.DEFAULT_GOAL := help
PY := .venv/bin/python

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

run: ## Install and start the platform in embedded mode (SQLite, built-in models, demo/demo)
	bash scripts/run.sh

test: ## Install everything and run lint, checks and the whole test suite (real PostgreSQL + Redis)
	bash scripts/test.sh

soak: ## The long runs kept out of `make test` (500 turns through the stack, a 24 MB import); PostgreSQL + Redis up
	bash scripts/services.sh
	.venv/bin/pytest --soak -m soak --durations=0

lint: ## ruff check + format check
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

format: ## Format the code with ruff
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .

# Where `make web` listens: `make web HOST=127.0.0.1 PORT=8080` (or HOST/PORT in the environment).
HOST ?= 0.0.0.0
PORT ?= 8000
# Beat's schedule file: in an ignored folder, not the repository root.
BEAT_SCHEDULE ?= var/celerybeat-schedule

web: ## Real mode: collect static files, then the ASGI server on HOST:PORT (needs DATABASE_URL, REDIS_URL, SECRET_KEY)
	$(PY) manage.py collectstatic --noinput -v 0
	.venv/bin/uvicorn chat_platform.asgi:application --host $(HOST) --port $(PORT) --workers 2 --timeout-graceful-shutdown 5 --ws-max-size 8388608

worker: ## Real mode: Celery workers, one process per core x CELERY_WORKER_CONCURRENCY threads (chat + compaction + heavy)
	bash scripts/worker.sh

worker-chat: ## Real mode, under load: workers for the chat queue only (pair with worker-compaction)
	WORKER_QUEUES=chat bash scripts/worker.sh

worker-compaction: ## Real mode, under load: one worker process for the compaction and heavy queues
	WORKER_QUEUES=$${WORKER_QUEUES:-compaction,heavy} WORKER_PROCESSES=$${WORKER_PROCESSES:-1} CELERY_WORKER_CONCURRENCY=$${CELERY_WORKER_CONCURRENCY:-4} bash scripts/worker.sh

beat: ## Real mode: Celery beat and its upkeep lane (the turns watchdog, the sweeps), one process
	mkdir -p $(dir $(BEAT_SCHEDULE))
	.venv/bin/celery -A chat_platform -q worker -B -Q upkeep -P threads -c 2 -n upkeep@%h -l INFO --schedule $(BEAT_SCHEDULE)

fuzz: ## schemathesis over the API's OpenAPI schema, anonymous and signed in (FUZZ_MAX_EXAMPLES, default 10): no 5xx
	FUZZ_ALL=1 FUZZ_MAX_EXAMPLES=$${FUZZ_MAX_EXAMPLES:-10} .venv/bin/pytest tests/test_fuzz_api.py -q -m fuzz --timeout 3600

bench: ## Run the benchmarks in bench/ (prints ratios; the stack benches start their own processes; not multihost)
	@for f in bench/[a-z]*.py; do [ "$$f" = bench/multihost.py ] && continue; echo "== $$f"; $(PY) $$f || exit 1; done

bench-smoke: ## Small bounded runs of turn_overhead and concurrent_sessions (fail on a lost turn)
	$(PY) bench/turn_overhead.py --pairs 3 --warmup 1 --smoke
	$(PY) bench/concurrent_sessions.py --quick --rate 10 --smoke

multihost: ## As root (iproute2, PostgreSQL 15 binaries, redis-server): the stack as 5 hosts in network namespaces; burst 200, files across hosts, a worker host killed
	$(PY) bench/multihost.py

.PHONY: help run test soak lint format web worker worker-chat worker-compaction beat bench bench-smoke multihost
