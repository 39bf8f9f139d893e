import contextvars
import time

import pytest
from _pytest.runner import runtestprotocol
from django.db import OperationalError
from django.test import TransactionTestCase
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chat_platform.celery_app import app as celery_app
from tests.factories import BotFactory, SessionFactory, UserFactory

pytest_plugins = ["tests.fakeopenai", "tests.file_order", "tests.mcpserver", "tests.realstack"]

# Rows that migrate's post_migrate handlers create (content types, permissions, the default
# site) and nothing in a test changes.
_KEPT_ON_FLUSH = frozenset({"django_content_type", "auth_permission", "django_site"})


def _fixture_teardown_keeping_migrated_rows(self):
    """A transactional test (``django_db(transaction=True)``) ends with every table emptied, as
    Django's ``flush`` does, except the rows above: ``flush`` truncates those too, then sends
    post_migrate to create them again (~0.2 s of CPU per test, a fifth of some directories'
    whole run). Keeping them keeps their ids, so the content-type cache stays right."""
    from django.db import connections

    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        tables = [
            table
            for table in connection.introspection.django_table_names(
                only_existing=True, include_views=False
            )
            if table not in _KEPT_ON_FLUSH
        ]
        # A worker can still be finishing a task of the test (an embedding, a soft compaction)
        # that holds row locks: one a test started itself, or the shared real stack's when the
        # test's wait for it timed out (tests/realstack.py). Locking table after table can
        # deadlock with it once. PostgreSQL aborts one side; go again.
        for attempt in range(5):
            try:
                _tables_emptied(connection, tables)
                break
            except OperationalError as error:
                if "deadlock detected" not in str(error) or attempt == 4:
                    raise
                time.sleep(0.2)


def _tables_emptied(connection, tables: list[str]) -> None:
    """Empty ``tables``. On PostgreSQL: lock them all as ``TRUNCATE`` would (a worker's open
    transaction is waited for, and no row lands between the lock and the commit), then delete
    their rows, foreign keys checked at commit (Django makes them deferrable). ``TRUNCATE``
    gives every table and index a new file: ~0.3 s of a quiet server for ~50 empty tables,
    0.5–3 s under the suite's load, a sixth of the suite's time; the deletes take ~15 ms."""
    from django.core.management.color import no_style
    from django.db import transaction

    if connection.vendor != "postgresql":
        statements = connection.ops.sql_flush(no_style(), tables, allow_cascade=False)
        connection.ops.execute_sql_flush(statements)
        return
    quoted = [connection.ops.quote_name(table) for table in tables]
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {', '.join(quoted)} IN ACCESS EXCLUSIVE MODE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute("".join(f"DELETE FROM {table};" for table in quoted))


TransactionTestCase._fixture_teardown = _fixture_teardown_keeping_migrated_rows


def pytest_addoption(parser):
    parser.addoption(
        "--soak", action="store_true", help="also run the soak tests (marker soak; make soak)"
    )


# Tests that start real processes (a web server, workers, Chromium) wait on them: a hang still
# ends, but a slowed machine's cold starts (seconds of imports each, several per test) do not.
PROCESS_TEST_TIMEOUT = 900
PROCESS_TEST_MARKERS = ("crossprocess", "browser")
PROCESS_TEST_FOLDERS = ("integration", "browser", "bench")


def _starts_processes(item) -> bool:
    folder = item.path.parent.name
    return folder in PROCESS_TEST_FOLDERS or any(
        item.get_closest_marker(name) for name in PROCESS_TEST_MARKERS
    )


def pytest_collection_modifyitems(config, items):
    """Soak tests (hundreds of turns, tens of megabytes) run only with ``--soak``: each has a
    sibling in the suite that proves the same property at a tenth of the size (docs/testing.md).

    Tests that start processes get ``PROCESS_TEST_TIMEOUT`` unless they set a timeout of their
    own."""
    for item in items:
        if _starts_processes(item) and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(PROCESS_TEST_TIMEOUT))
    if config.getoption("--soak"):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Run each test (setup, call, teardown) in its own copy of the main thread's context.

    asgiref's context propagation (``_restore_context`` in ``async_to_sync``/``sync_to_async``,
    django/asgiref#467, still open) can, rarely, leave an ``asgiref.local`` variable set to
    ``None`` in the calling context; every later ``Local`` access there raises TypeError. In
    one CI run that happened once and nine later tests failed on ``caches.close_all()``. A copy
    per test keeps whatever a test does to context variables inside that test, and the copy is
    checked afterwards so a leak is reported against the test that caused it."""
    context = contextvars.copy_context()
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    context.run(runtestprotocol, item, nextitem=nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    broken = [
        var for var, value in context.items() if var.name == "asgiref.local" and value is None
    ]
    if broken:
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        line = f"CONTEXT LEAK: {item.nodeid} left {len(broken)} asgiref.local variable(s) None"
        if reporter is not None:
            reporter.write_line(line, red=True)
    return True


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Each test process's PostgreSQL database is a clone of one migrated template
    (``processes.postgres_template``) instead of migrated on its own."""
    from django.conf import settings

    from tests.integration.processes import postgres_template

    default = settings.DATABASES["default"]
    if default["ENGINE"] == "django.db.backends.postgresql":
        default.setdefault("TEST", {})["TEMPLATE"] = postgres_template()


@pytest.fixture(scope="session", autouse=True)
def _redis_cache_cleared_once():
    """The run starts from an empty Redis cache: an earlier run on the same Redis db leaves
    import progress and heavy-request slots keyed by user ids that this run's new test database
    hands out again (a second run then read the first run's "done")."""
    from django.core.cache import caches

    caches["progress"].clear()  # the Redis cache's clear empties its whole database
    yield


@pytest.fixture(autouse=True)
def _sign_in_throttle_cleared():
    """Every test starts with no failed sign-ins counted (chat_platform/signin.py): tests that
    sign in many times, or on purpose wrongly, never lock out the next one."""
    from chat_platform.signin import sign_in_throttle_clear

    sign_in_throttle_clear()
    yield


@pytest.fixture
def eager_tasks():
    """Run Celery tasks in-process for this test (tests say so explicitly)."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def inprocess_tasks(settings):
    """Embedded mode's task runner for this test: a dispatched task runs on the in-process task
    threads (chat_platform/inprocess.py), never in the request or socket handler that dispatched
    it. The threads read committed rows only: use it with ``django_db(transaction=True)``.
    Everything queued has run when the test ends."""
    from chat_platform.inprocess import tasks_wait_idle

    settings.TASKS_IN_PROCESS = True
    yield tasks_wait_idle
    assert tasks_wait_idle(60), "in-process tasks still running at the end of the test"


@pytest.fixture
def owner(db):
    return UserFactory(username="owner")


@pytest.fixture
def other_user(db):
    return UserFactory(username="other")


@pytest.fixture
def staff(db):
    return UserFactory(username="staff", is_staff=True)


def _client_for(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    client.token = token.key
    return client


@pytest.fixture
def owner_client(owner):
    return _client_for(owner)


@pytest.fixture
def other_client(other_user):
    return _client_for(other_user)


@pytest.fixture
def staff_client(staff):
    return _client_for(staff)


@pytest.fixture
def bot(owner):
    return BotFactory(owner=owner)


@pytest.fixture
def chat_session(owner, bot):
    return SessionFactory(user=owner, bot=bot)


FAKE_KEY_ENV = "CHAT_PLATFORM_TEST_FAKE_KEY"
FAKE_KEY = "sk-test-fake-key"


@pytest.fixture
def fake_bot(owner, fake_openai, monkeypatch):
    """A bot that talks to the local fake OpenAI-compatible server through litellm."""
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    return BotFactory(
        owner=owner, model="openai/fake-model", api_base=fake_openai.url, api_key_env=FAKE_KEY_ENV
    )


@pytest.fixture
def fake_session(owner, fake_bot):
    return SessionFactory(user=owner, bot=fake_bot)


@pytest.fixture
def inmemory_channel_layer(settings):
    """In-process websocket tests use the in-memory layer: the test loop is torn down with
    every test, and a Redis receive cancelled at that moment can outlive it. The Redis layer is
    exercised for real by the cross-process tests (uvicorn + worker + Redis)."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def case_whens_built(monkeypatch):
    """The arguments of every ``When`` Django builds during the test (``bulk_update`` builds a
    ``CASE WHEN pk = … THEN …`` per row and field; ``chat_platform.dbwrite.rows_update`` none)."""
    from django.db.models import expressions

    built = []
    real_init = expressions.When.__init__

    def counted(self, *args, **kwargs):
        built.append(args)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(expressions.When, "__init__", counted)
    return built


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases, dropped at the end without waiting on a connection that
    a thread of the run still holds (an in-process task thread, a fake server's handler):
    PostgreSQL's ``DROP DATABASE`` waits 5 s for other sessions to leave, then fails and leaves
    the database behind ("is being accessed by other users")."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        for connection in connections.all(initialized_only=True):
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
