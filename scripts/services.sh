#!/usr/bin/env bash
# Make sure PostgreSQL (127.0.0.1:5432, trust auth, database "test") and Redis (127.0.0.1:6379)
# answer; install and start them if they do not. Used by `make test` and CI.
set -euo pipefail

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "need root to apt-get install $*" >&2
    exit 1
  fi
  if [ -z "${APT_UPDATED:-}" ]; then
    apt-get update -q
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

pg_answers() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_answers() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

if ! command -v pg_isready >/dev/null || ! pg_answers; then
  command -v pg_ctlcluster >/dev/null || apt_install postgresql
  echo "starting PostgreSQL"
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do pg_answers && break; sleep 1; done
  pg_answers || { echo "PostgreSQL does not answer on 127.0.0.1:5432" >&2; exit 1; }
fi

if ! command -v redis-cli >/dev/null || ! redis_answers; then
  command -v redis-server >/dev/null || apt_install redis-server
  echo "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis_answers && break; sleep 1; done
  redis_answers || { echo "Redis does not answer on 127.0.0.1:6379" >&2; exit 1; }
fi

# Tests connect as postgres with trust auth and need the "test" database to exist.
if ! psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname='test'" | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -c "create database test"
fi
echo "PostgreSQL and Redis answer"
