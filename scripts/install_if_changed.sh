#!/usr/bin/env bash
# Embedded mode (scripts/run.sh): install the package into .venv only when pyproject.toml changed
# since the last install, so a restart with nothing changed starts in seconds. The hash of the
# pyproject.toml last installed is kept in .venv/.installed-pyproject.sha256; a failed install
# leaves the stamp as it was, so the next start tries again.
set -euo pipefail
venv="${1:-.venv}"
stamp="$venv/.installed-pyproject.sha256"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
  exit 0
fi
bash "$(dirname "$0")/install.sh" "$venv"
echo "$want" > "$stamp"
echo "installed the package (pyproject.toml changed)"
