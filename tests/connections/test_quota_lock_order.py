"""Two subjects pay for one call (the user and the API key it came through): every writer of
their counters locks them in one order, so concurrent turns never deadlock (docs/connections.md
"The hold rule"). The reserve locked the user's row, then the key's; the settle both at once in
the index's order (the key's first): under 80 concurrent /v1 calls PostgreSQL broke deadlocks,
35 calls answered 503, their provider tokens went uncounted and their holds stayed all day."""

import threading

import pytest
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext

from connections import usage
from connections.models import TokenCounter

pytestmark = pytest.mark.django_db(transaction=True)

LIMITS = [usage.Limit("user:7", 10_000_000), usage.Limit("key:5", 10_000_000)]


def _subjects_in_order(queries) -> list[str]:
    order = []
    for query in queries:
        sql = query["sql"]
        if sql.startswith("UPDATE") and "connections_tokencounter" in sql:
            order.append("key" if "'key:5'" in sql else "user" if "'user:7'" in sql else sql)
    return order


def test_the_reserve_the_count_and_the_settle_lock_the_subjects_in_one_order():
    with CaptureQueriesContext(connection) as reserved:
        reservation = usage.quota_reserve(LIMITS, tokens=100)
    meter = usage.Meter(reservation)
    meter.add(30)
    with CaptureQueriesContext(connection) as counted:
        meter.count_so_far()
    meter.add(20)
    with CaptureQueriesContext(connection) as settled:
        meter.settle()

    assert _subjects_in_order(reserved.captured_queries) == ["key", "user"]
    assert _subjects_in_order(counted.captured_queries) == ["key", "user"]
    assert _subjects_in_order(settled.captured_queries) == ["key", "user"]
    assert sorted(TokenCounter.objects.values_list("subject", "used", "reserved")) == [
        ("key:5", 50, 0),
        ("user:7", 50, 0),
    ]


def test_concurrent_turns_charging_a_user_and_a_key_never_deadlock():
    usage.quota_reserve(LIMITS, tokens=0)  # both rows exist
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def turns() -> None:
        try:
            start.wait()
            for _ in range(25):
                meter = usage.Meter(usage.quota_reserve(LIMITS, tokens=10))
                meter.add(3)
                meter.count_so_far()
                meter.add(4)
                meter.settle()
        except BaseException as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=turns) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert errors == []
    # 8 x 25 turns of 7 tokens each, every hold released.
    assert sorted(TokenCounter.objects.values_list("subject", "used", "reserved")) == [
        ("key:5", 1400, 0),
        ("user:7", 1400, 0),
    ]
