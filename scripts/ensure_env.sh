#!/usr/bin/env bash
# Embedded mode: make sure the .env beside manage.py names a SECRET_KEY, so every manage.py
# command (createsuperuser, shell, …) works in this checkout without exporting anything.
# Writes a random key once; an existing SECRET_KEY line is never changed.
set -euo pipefail
env_file="${1:-.env}"
if [ -f "$env_file" ] && grep -q '^SECRET_KEY=' "$env_file"; then
  exit 0
fi
key="$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')"
{
  echo "# Written by make run: the key that signs this checkout's sessions. Keep it secret."
  echo "SECRET_KEY=$key"
} >> "$env_file"
chmod 600 "$env_file"
echo "wrote a new SECRET_KEY to $env_file"
