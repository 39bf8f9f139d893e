"""The mark of tests about psycopg's connection pool (PostgreSQL with ``OPTIONS["pool"]``, as
`make test` runs): skipped on a run against SQLite or without the pool, where there is none."""

import pytest
from django.db import connection

pooled_only = pytest.mark.skipif(
    connection.vendor != "postgresql" or "pool" not in connection.settings_dict["OPTIONS"],
    reason="the PostgreSQL connection pool",
)
