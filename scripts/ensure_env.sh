#!/usr/bin/env bash
# Embedded mode: make sure the .env beside manage.py names a SECRET_KEY and a
# CONNECTION_ENCRYPTION_KEY, so every manage.py command (createsuperuser, shell, …) works in this
# checkout without exporting anything, and a staff user can save a provider connection's key
# (connections/crypto.py: any string of at least 32 characters). Writes each random key once; an
# existing line is never changed, unless it is empty or .env.example's public placeholder (a
# .env copied from the example, as docker-compose.yml asks): that line is replaced in place.
set -euo pipefail
env_file="${1:-.env}"
placeholder="change-me-to-a-long-random-string"

ensure_key() {  # name, comment
  local key value
  key="$(python3 -c 'import secrets; print(secrets.token_urlsafe(48))')"
  if [ -f "$env_file" ] && grep -q "^$1=" "$env_file"; then
    value="$(grep "^$1=" "$env_file" | tail -n 1)"
    value="${value#"$1="}"
    if [ -n "$value" ] && [ "$value" != "$placeholder" ]; then
      return 0
    fi
    # token_urlsafe writes only [A-Za-z0-9_-]: safe in a sed replacement.
    sed -i "s/^$1=.*\$/$1=$key/" "$env_file"
    chmod 600 "$env_file"
    echo "replaced the placeholder $1 in $env_file"
    return 0
  fi
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
