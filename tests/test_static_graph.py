"""The browser modules form a one-way graph (docs/architecture.md): every ES module under static/
sits on a floor named by its folder, imports only files that exist, imports nothing from a
higher floor, and no chain of imports comes back to where it started. A new module is checked by
the folder it is put in; a folder that is not a floor below fails here until it is declared.

Read from the source text, no JavaScript engine: static ``import … from "…"``, bare
``import "…"``, ``export … from "…"`` and dynamic ``import("…")``, relative or absolute
(``/static/…``) specifiers, resolved as the browser resolves them."""

import re
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "static"
STATIC_URL = "/static/"

# The floors, lowest first: a module may import from its own floor or any floor below. The key is
# a module's folder under static/. Same floor imports are allowed but must not form a cycle.
FLOORS = {
    "chat/lib": 0,  # shared helpers that know no page state: the element builder, formats
    "chat/state": 1,  # what the page holds: elements, open bot and chat, messages, room, hooks
    "chat/transport": 2,  # the REST API and the websocket
    "chat/render": 3,  # what is drawn: transcript, markers, gauge, banner, avatars
    "chat/controllers": 4,  # what the user and the server's frames make happen
    "chat": 5,  # what the templates load: the entry module chat.js and the classic scripts
    "bots": 5,  # the bot settings page's own script
    # Third-party classic scripts (UMD), loaded by <script> tags, never imported.
    "vendor/dompurify": 5,
    "vendor/highlight": 5,
    "vendor/katex": 5,
    "vendor/marked": 5,
}

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"^\s*//.*$", re.M)
_STATIC_IMPORT = re.compile(
    r"^\s*(?:import|export)\s+(?:[\w$*{}\s,]+?\s+from\s+)?[\"']([^\"']+)[\"']", re.M
)
_DYNAMIC_IMPORT = re.compile(r"\bimport\(\s*([^)]*?)\s*\)")
_LITERAL = re.compile(r"^[\"'`]([^\"'`$]+)[\"'`]$")


def _modules() -> list[Path]:
    return sorted(STATIC.rglob("*.js"))


def _name(path: Path) -> str:
    return path.relative_to(STATIC).as_posix()


def _specifiers(path: Path) -> list[str]:
    """Every module specifier ``path`` imports; a dynamic import of a computed name is kept as
    its expression so that it fails to resolve instead of passing unseen."""
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", path.read_text()))
    found = _STATIC_IMPORT.findall(text)
    for argument in _DYNAMIC_IMPORT.findall(text):
        literal = _LITERAL.match(argument)
        found.append(literal[1] if literal else f"<computed: import({argument})>")
    return found


def _resolve(importer: str, specifier: str) -> str | None:
    """The importing module's view of ``specifier`` as a path under static/, or None when a
    browser without a build step could not load it (a bare name, a computed import)."""
    if specifier.startswith(STATIC_URL):
        target = PurePosixPath(specifier[len(STATIC_URL) :])
    elif specifier.startswith(("./", "../")):
        target = PurePosixPath(importer).parent / specifier
    else:
        return None
    parts: list[str] = []
    for part in target.parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _graph() -> tuple[dict[str, list[str]], list[str]]:
    graph: dict[str, list[str]] = {}
    broken = []
    for path in _modules():
        name = _name(path)
        graph[name] = []
        for specifier in _specifiers(path):
            target = _resolve(name, specifier)
            if target is None or not (STATIC / target).is_file():
                broken.append(f"{name}: {specifier!r} names no file under static/")
            else:
                graph[name].append(target)
    return graph, broken


def _cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path = [start]
        stack = [iter(graph[start])]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                done.add(path.pop())
                stack.pop()
            elif target in path:
                return path[path.index(target) :] + [target]
            elif target not in done:
                path.append(target)
                stack.append(iter(graph.get(target, [])))
    return None


def _floor(module: str) -> int | None:
    return FLOORS.get(str(PurePosixPath(module).parent))


def test_the_graph_reader_sees_every_kind_of_import(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.js").write_text(
        '/* import { no } from "./commented.js"; */\n'
        '// import { no } from "./commented.js";\n'
        'import { x,\n  y } from "./two.js";\n'
        "import '../b/three.js';\n"
        'export { z } from "/static/a/two.js";\n'
        'const later = () => import("./two.js");\n'
        "const named = () => import(name);\n"
        'import { gone } from "./missing.js";\n'
        'import { bare } from "lodash";\n'
    )
    (tmp_path / "a" / "two.js").write_text("export const x = 1;\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "three.js").write_text('import "../a/one.js";\n')
    monkeypatch.setattr(f"{__name__}.STATIC", tmp_path)
    graph, broken = _graph()
    assert graph == {
        "a/one.js": ["a/two.js", "b/three.js", "a/two.js", "a/two.js"],
        "a/two.js": [],
        "b/three.js": ["a/one.js"],
    }
    assert broken == [
        "a/one.js: './missing.js' names no file under static/",
        "a/one.js: 'lodash' names no file under static/",
        "a/one.js: '<computed: import(name)>' names no file under static/",
    ]
    assert _cycle(graph) == ["a/one.js", "b/three.js", "a/one.js"]
    assert _cycle({"a": ["b", "c"], "b": ["c"], "c": []}) is None


def test_every_imported_file_exists():
    graph, broken = _graph()
    assert "chat/chat.js" in graph
    assert broken == []


def test_no_import_cycle():
    graph, _broken = _graph()
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_module_sits_on_a_declared_floor():
    graph, _broken = _graph()
    assert [module for module in graph if _floor(module) is None] == []


def _upward(graph: dict[str, list[str]]) -> list[str]:
    return [
        f"{module} (floor {_floor(module)}) imports {target} (floor {_floor(target)})"
        for module, targets in graph.items()
        for target in targets
        if (_floor(target) or 0) > (_floor(module) or 0)
    ]


def test_an_upward_import_is_named_with_both_floors():
    graph = {
        "chat/render/transcript.js": ["chat/controllers/sending.js", "chat/state/state.js"],
        "chat/controllers/sending.js": ["chat/render/transcript.js"],
        "chat/state/state.js": ["chat/lib/format.js"],
        "chat/lib/format.js": [],
    }
    assert _upward(graph) == [
        "chat/render/transcript.js (floor 3) imports chat/controllers/sending.js (floor 4)"
    ]


def test_no_module_imports_from_a_higher_floor():
    graph, _broken = _graph()
    assert _upward(graph) == []


def _names(pattern: str, text: str) -> list[str]:
    return re.findall(pattern, _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", text)))


def test_every_hook_is_declared_provided_once_and_called():
    """The upward calls (static/chat/state/hooks.js) are wired in one place, chat.js: a hook a
    module calls must be declared and provided, or the page fails on that click, not at load."""
    declared_block = re.search(
        r"const DECLARED = \[(.*?)\];", (STATIC / "chat/state/hooks.js").read_text(), re.S
    )
    assert declared_block is not None
    declared = _names(r'"(\w+)"', declared_block[1])
    provide_block = re.search(
        r"^provide\(\{(.*?)\}\);", (STATIC / "chat/chat.js").read_text(), re.S | re.M
    )
    assert provide_block is not None
    provided = _names(r"\b(\w+)\b", provide_block[1])
    called = {
        name
        for path in (STATIC / "chat").rglob("*.js")
        for name in _names(r"\bhooks\.(\w+)\(", path.read_text())
    }
    assert len(declared) == len(set(declared))
    assert sorted(provided) == sorted(declared)
    assert called == set(declared)
