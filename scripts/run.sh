#!/usr/bin/env bash
# Install and start the platform in embedded mode: SQLite, in-process tasks, built-in models,
# a demo/demo user. Open http://127.0.0.1:8000/ when it says it is running.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
fi
# Install only when pyproject.toml changed since the last install: a restart starts in seconds.
bash scripts/install_if_changed.sh .venv

bash scripts/ensure_env.sh .env
export DEBUG="${DEBUG:-true}"
unset REDIS_URL
# The demo tool server (scripts/demo_mcp.py, docs/tools.md) beside the platform, stopped with it;
# it starts while the database is migrated and seeded (one process: one start of Django).
# A port someone else listens on is left alone: the demo bot would call their server.
DEMO_MCP_PORT="${DEMO_MCP_PORT:-8765}"
tools_url=()
# (SO_REUSEADDR, as the server binds: only a listener makes the port taken, not TIME_WAIT.)
port_free='import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))'
if python3 -c "$port_free" "$DEMO_MCP_PORT" 2>/dev/null; then
  .venv/bin/python scripts/demo_mcp.py --port "$DEMO_MCP_PORT" &
  DEMO_MCP_PID=$!
  trap 'kill "$DEMO_MCP_PID" 2>/dev/null || true' EXIT
  tools_url=(--tools-url "http://127.0.0.1:${DEMO_MCP_PORT}/mcp")
else
  echo "port $DEMO_MCP_PORT is taken: the demo tool server is not started" \
    "(set DEMO_MCP_PORT to a free port for the Tools demo bot)" >&2
fi
.venv/bin/python manage.py seed_demo --migrate "${tools_url[@]}"
echo "chat-platform running at http://127.0.0.1:${PORT:-8000}/  (sign in as demo / demo)"
.venv/bin/python -m uvicorn chat_platform.asgi:application \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --ws-max-size 8388608
