"""A pooled PostgreSQL connection that the server ended (a restart, a failover, an idle timeout,
``pg_terminate_backend``) is checked before it is lent, and replaced: the next request gets a
live one, instead of failing as ``service_unavailable`` while PostgreSQL is up
(``CONN_HEALTH_CHECKS``; docs/operations.md)."""

import psycopg
import pytest
from django.db import connection

from tests.pooled import pooled_only

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pooled_only,
]


def test_a_connection_the_server_ended_is_not_lent_again():
    pool = connection.pool
    lent = [pool.getconn() for _ in range(2)]
    pids = [conn.info.backend_pid for conn in lent]
    for conn in lent:
        pool.putconn(conn)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as killer:
        for pid in pids:
            killer.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    answers = []
    for _ in range(2):
        conn = pool.getconn()
        try:
            answers.append(conn.execute("SELECT 1").fetchone()[0])
        finally:
            pool.putconn(conn)
    assert answers == [1, 1]
