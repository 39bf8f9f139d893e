.DEFAULT_GOAL := help
PY := .venv/bin/python

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

run: ## Install and start the platform in embedded mode (SQLite, built-in models, demo/demo)
	bash scripts/run.sh

test: ## Install everything and run lint, checks and the whole test suite (real PostgreSQL + Redis)
	bash scripts/test.sh

lint: ## ruff check + format check
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

format: ## Format the code with ruff
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .

web: ## Real mode: ASGI server (needs DATABASE_URL, REDIS_URL, SECRET_KEY)
	.venv/bin/uvicorn chat_platform.asgi:application --host 0.0.0.0 --port 8000 --workers 2 --timeout-graceful-shutdown 5

worker: ## Real mode: Celery worker for the chat and compaction queues
	.venv/bin/celery -A chat_platform -q worker -Q chat,compaction -P threads -c 64 -l INFO

beat: ## Real mode: Celery beat (orphan sweep every minute)
	.venv/bin/celery -A chat_platform -q beat -l INFO

bench: ## Run the benchmarks in bench/ (prints ratios)
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

.PHONY: help run test lint format web worker beat bench
