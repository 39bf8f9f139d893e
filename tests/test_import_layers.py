"""Every module of the contract's root packages stands on a floor of the one `layers` contract
(pyproject.toml), so `lint-imports` checks it: a module added tomorrow outside the floors that
are whole packages fails here until it is given one, instead of going unchecked. The packages
are the contract's own ``root_packages``, so a package added to the contract is covered too."""

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _layers_contract() -> dict:
    (contract,) = [c for c in _config()["contracts"] if c["type"] == "layers"]
    return contract


def _floors(contract: dict) -> list[str]:
    modules = []
    for layer in contract["layers"]:
        modules += [name.strip(" ()\\\n") for name in layer.replace("\\", "").split(":")]
    return modules


def test_every_module_is_on_a_floor_of_the_layers_contract():
    floors = _floors(_layers_contract())
    packages = _config()["root_packages"]
    graph = grimp.build_graph(*packages)

    def on_a_floor(module: str) -> bool:
        return any(module == f or module.startswith(f + ".") for f in floors)

    def holds_a_floor(module: str) -> bool:
        return any(f.startswith(module + ".") for f in floors)

    unchecked = sorted(m for m in graph.modules if not on_a_floor(m) and not holds_a_floor(m))
    assert unchecked == []
    # A package that holds floors (``bots``, ``compaction``, ``memory``) is checked by none, so
    # its ``__init__`` imports nothing of ours.
    holders = [m for m in graph.modules if holds_a_floor(m) and not on_a_floor(m)]
    assert {m: sorted(graph.find_modules_directly_imported_by(m)) for m in holders} == {
        m: [] for m in holders
    }


def test_the_floors_are_read_as_lint_imports_reads_them():
    floors = _floors(_layers_contract())
    assert floors[0] == "bots.api"
    assert floors[-1] == "chat_platform"
    assert "compaction.engine" in floors and "bots.models" in floors
