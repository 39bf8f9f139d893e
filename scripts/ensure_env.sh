#!/usr/bin/env bash
# Embedded mode: make sure the .env beside manage.py names a SECRET_KEY and a
# CONNECTION_ENCRYPTION_KEY, so every manage.py command (createsuperuser, shell, …) works in this
# checkout without exporting anything, and a staff user can save a provider connection's key
# (connections/crypto.py: any string of at least 32 characters). Writes each random key once; an
# existing line is never changed.
set -euo pipefail
env_file="${1:-.env}"

ensure_key() {  # name, comment
  if [ -f "$env_file" ] && grep -q "^$1=" "$env_file"; then
    return 0
  fi
  local key
  key="$(python3 -c 'import secrets; print(secrets.token_urlsafe(48))')"
  {
    echo "# Written by make run: $2 Keep it secret."
    echo "$1=$key"
  } >> "$env_file"
  chmod 600 "$env_file"
  echo "wrote a new $1 to $env_file"
}

ensure_key SECRET_KEY "the key that signs this checkout's sessions."
ensure_key CONNECTION_ENCRYPTION_KEY \
  "the key provider connections' API keys are encrypted under; changing it loses them."
