#!/usr/bin/env bash
# Install this package into a virtualenv: scripts/install.sh VENV [EXTRAS] (e.g. "dev").
# With uv when it can be had (a fresh environment in ~9 s; pip took ~58 s of the CI run's
# 72 s install phase), else with pip: the same versions either way (docs/testing.md).
set -euo pipefail
venv="$1"
target=".${2:+[$2]}"
# pip's own warnings about local package folders this machine's config names are noise here.
if "$venv/bin/python" -m pip install -q uv 2>/dev/null && [ -x "$venv/bin/uv" ]; then
  "$venv/bin/uv" pip install -q --python "$venv/bin/python" -e "$target"
else
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e "$target"
fi
