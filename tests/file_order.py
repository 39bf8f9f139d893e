"""The longest test files first (docs/testing.md, "Longest first").

`make test` runs the suite in several processes, a whole file to a process (`--dist loadfile`).
pytest-xdist hands the files out in the order it is given them, and by default reorders them by
their number of tests, most first. The files that start servers, workers or a browser have few
tests and take the longest, so they came last and the run ended with one process finishing them
while the others had nothing left to do. Here the files are ordered by how long each took in an
earlier run (``tests/file_times.json``), longest first, and `scripts/test.sh` passes
``--no-loadscope-reorder`` so that order is kept. A file the record does not list (a new one)
goes with those of ``UNKNOWN_SECONDS``. Tests keep their order within a file.

``--store-file-times PATH`` writes the times of this run, per file (setup, call and teardown of
its tests, in seconds), for the record: `make test`'s run, without the browser tests and with
them, is the one to keep.
"""

import json
from collections import Counter
from pathlib import Path

import pytest

TIMES = Path(__file__).with_name("file_times.json")
# Seconds assumed for a file the record does not list: about a middling file's.
UNKNOWN_SECONDS = 5.0


def pytest_addoption(parser):
    parser.addoption(
        "--store-file-times",
        metavar="PATH",
        default=None,
        help="write each test file's seconds in this run to PATH (JSON; tests/file_times.json)",
    )


def file_seconds(path: Path = TIMES) -> dict[str, float]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def longest_first(items: list, seconds: dict[str, float]) -> list:
    """``items`` with their files in order of ``seconds`` (most first); a stable sort, so a
    file's tests stay together and in their order, and files of equal time in theirs."""

    def weight(item) -> float:
        return -seconds.get(item.nodeid.split("::", 1)[0], UNKNOWN_SECONDS)

    return sorted(items, key=weight)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    items[:] = longest_first(items, file_seconds())


class _FileTimes:
    def __init__(self, path: str):
        self.path = Path(path)
        self.seconds: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_sessionfinish(self, session):
        if hasattr(session.config, "workerinput"):
            return  # a pytest-xdist worker: the controller has every report
        # The files of this run replace theirs; the others' (the other phase's) are kept.
        times = file_seconds(self.path) | {name: round(s, 1) for name, s in self.seconds.items()}
        self.path.write_text(json.dumps(times, indent=0, sort_keys=True) + "\n", encoding="utf-8")


def pytest_configure(config):
    path = config.getoption("--store-file-times")
    if path:
        config.pluginmanager.register(_FileTimes(path), "file-times")
