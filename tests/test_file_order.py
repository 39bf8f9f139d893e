"""The suite's files go out longest first (tests/file_order.py, docs/testing.md)."""

import json
from types import SimpleNamespace

from tests.file_order import TIMES, UNKNOWN_SECONDS, _FileTimes, file_seconds, longest_first


def _items(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_go_longest_first_and_keep_their_tests_order():
    items = _items(
        "tests/a.py::test_1",
        "tests/a.py::test_2",
        "tests/b.py::test_1",
        "tests/new.py::test_1",
        "tests/c.py::test_1",
        "tests/c.py::test_2",
    )
    seconds = {"tests/a.py": 2.0, "tests/b.py": 90.0, "tests/c.py": 30.0}
    assert [i.nodeid for i in longest_first(items, seconds)] == [
        "tests/b.py::test_1",
        "tests/c.py::test_1",
        "tests/c.py::test_2",
        "tests/new.py::test_1",  # not in the record: UNKNOWN_SECONDS (5), after c, before a
        "tests/a.py::test_1",
        "tests/a.py::test_2",
    ]
    assert UNKNOWN_SECONDS == 5.0


def test_files_of_equal_time_keep_the_collection_order():
    items = _items("tests/x.py::t", "tests/w.py::t", "tests/v.py::t")
    assert [i.nodeid for i in longest_first(items, {})] == [
        "tests/x.py::t",
        "tests/w.py::t",
        "tests/v.py::t",
    ]


def test_the_record_lists_the_slow_files_with_seconds():
    seconds = file_seconds()
    assert seconds == json.loads(TIMES.read_text(encoding="utf-8"))
    assert all(name.startswith("tests/") and name.endswith(".py") for name in seconds)
    assert all(isinstance(s, float | int) and s > 0 for s in seconds.values())
    # Whichever file the record has as the longest goes out first, however the record is
    # refreshed (no figure of its own is asserted here).
    slowest = max(seconds, key=seconds.get)
    items = _items("tests/unlisted_a.py::t", f"{slowest}::t", "tests/unlisted_b.py::t")
    assert longest_first(items, seconds)[0].nodeid == f"{slowest}::t"


def test_a_run_stores_its_files_times_beside_the_other_phases(tmp_path):
    record = tmp_path / "times.json"
    record.write_text(json.dumps({"tests/browser/test_b.py": 12.5, "tests/test_c.py": 9.0}))
    times = _FileTimes(str(record))
    for nodeid, duration in [
        ("tests/test_c.py::test_1", 0.25),  # setup
        ("tests/test_c.py::test_1", 1.5),  # call
        ("tests/test_c.py::test_1", 0.05),  # teardown
        ("tests/test_d.py::test_1", 3.0),
    ]:
        times.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=duration))
    worker = SimpleNamespace(config=SimpleNamespace(workerinput={}))
    times.pytest_sessionfinish(worker)  # an xdist worker writes nothing
    assert json.loads(record.read_text())["tests/test_c.py"] == 9.0
    times.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    assert json.loads(record.read_text()) == {
        "tests/browser/test_b.py": 12.5,  # the other phase's, kept
        "tests/test_c.py": 1.8,
        "tests/test_d.py": 3.0,
    }
