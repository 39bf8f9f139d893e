"""The packages are the floors (docs/architecture.md): what `lint-imports` leaves to us.

The `layers` contract in pyproject.toml names packages and sets the interface modules aside
(`ignore_imports`: they may import any floor). Two rules it cannot say itself are checked here on
the same import graph: nothing below an interface imports one, and squashed to packages (the
interfaces and the composition root aside) the packages import each other without a cycle.
"""

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
HOUSE = next(c for c in CONFIG["contracts"] if c["type"] == "layers")
COMPOSITION_ROOT = {"chat_platform.urls", "chat_platform.asgi"}


def _interfaces() -> set[str]:
    names = set()
    for rule in HOUSE["ignore_imports"]:
        importer = rule.split("->")[0].strip()
        names.add(importer.removesuffix(".**"))
    return names - COMPOSITION_ROOT


def _is_under(module: str, roots: set[str]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


GRAPH = grimp.build_graph(*CONFIG["root_packages"], cache_dir=None)
INTERFACES = _interfaces()
ASIDE = INTERFACES | COMPOSITION_ROOT


def test_the_interfaces_named_exist():
    missing = sorted(m for m in INTERFACES if m not in GRAPH.modules)
    assert missing == []


def test_nothing_below_an_interface_imports_one():
    wrong = []
    for importer in sorted(GRAPH.modules):
        if _is_under(importer, ASIDE):
            continue
        for imported in GRAPH.find_modules_directly_imported_by(importer):
            if _is_under(imported, INTERFACES):
                wrong.append(f"{importer} -> {imported}")
    assert wrong == []


def _package_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {p: set() for p in CONFIG["root_packages"]}
    for importer in GRAPH.modules:
        if _is_under(importer, ASIDE):
            continue
        for imported in GRAPH.find_modules_directly_imported_by(importer):
            a, b = importer.split(".")[0], imported.split(".")[0]
            if a != b and b in edges:
                edges[a].add(b)
    return edges


def test_squashed_to_packages_there_is_no_cycle():
    edges = _package_edges()
    seen: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        seen[node] = 1
        for nxt in sorted(edges[node]):
            if seen.get(nxt) == 1:
                cycle.extend(path[path.index(nxt) :] + [node, nxt] if nxt in path else [node, nxt])
                return True
            if nxt not in seen and visit(nxt, path + [node]):
                return True
        seen[node] = 2
        return False

    for package in sorted(edges):
        if package not in seen and visit(package, []):
            break
    assert cycle == []


def test_the_layers_are_the_packages_top_to_bottom():
    # The contract names whole packages, each once: no package split across floors.
    layers = HOUSE["layers"]
    assert sorted(layers) == sorted(CONFIG["root_packages"])
    assert layers[-1] == "chat_platform"
    assert layers.index("turns") < layers.index("compaction") < layers.index("bots")
