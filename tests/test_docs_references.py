"""The docs name only files and functions that exist: every backticked repository path in
``docs/*.md`` and the README (``bots/transitions.py``, ``turns/services/send.py:
session_message_send``) is a file of the repository, and every dotted name that starts with one
of our modules (``bots.transitions.reply_claim``) is defined there. A move that forgets its docs
fails here instead of misleading the next reader."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    path.name
    for path in ROOT.iterdir()
    if path.is_dir() and (path / "__init__.py").exists() and path.name != "tests"
} | {"tests", "bench", "scripts", "static", "templates", "docs"}
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# A path with an extension, e.g. `turns/turn.py`, `static/chat/composer.js`, `bench/x.py:12`,
# `turns/services/send.py: session_message_send`.
PATH = re.compile(r"^(?P<path>[\w.-]+(?:/[\w.-]+)*\.\w+)(?::\s*(?P<name>[A-Za-z_]\w*)?.*)?$")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?$")


def _defines(source: str, name: str) -> bool:
    return bool(
        re.search(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b", source, re.M)
        or re.search(rf"^\s*{re.escape(name)}\s*[:=]", source, re.M)
        or re.search(rf"\bimport\b.*\b{re.escape(name)}\b", source)
    )


def _module(parts: list[str]) -> tuple[Path, int] | None:
    """The longest prefix of ``parts`` (at least two) that is a module of the repository."""
    for size in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:size])
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), size
        if (base / "__init__.py").is_file():
            return base / "__init__.py", size
    return None


def _broken(text: str) -> list[str]:
    broken = []
    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.strip()
        head = re.split(r"[/.]", token, maxsplit=1)[0]
        if head not in PACKAGES:
            continue
        path = PATH.match(token)
        if path and "/" in path["path"]:
            target = ROOT / path["path"]
            if not target.exists():
                broken.append(f"{token}: no such file")
            elif (
                path["name"]
                and target.suffix == ".py"
                and not _defines(target.read_text(), path["name"])
            ):
                broken.append(f"{token}: {path['name']} is not defined there")
            continue
        if DOTTED.match(token):
            parts = token.removesuffix("()").split(".")
            found = _module(parts)
            if found is None:
                continue  # an app label (`compaction.SummaryCoverage`), a frame, a check id
            module, size = found
            if size < len(parts) and not _defines(module.read_text(), parts[size]):
                broken.append(f"{token}: {parts[size]} is not defined in {module.name}")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_docs_name_only_what_exists(doc):
    assert _broken(doc.read_text()) == []


def test_the_check_finds_a_moved_function_and_a_missing_file():
    assert _broken(
        "`turns/services.py: session_message_send`, `turns.services.reply_claim`, "
        "`bots.transitions.reply_claim`, `bots/nowhere.py`, `compaction.started`"
    ) == [
        "turns/services.py: session_message_send: no such file",
        "turns.services.reply_claim: reply_claim is not defined in __init__.py",
        "bots/nowhere.py: no such file",
    ]


def test_the_code_cites_only_its_own_docs():
    """Comments cite the pages of docs/, never a document the repository does not hold."""
    outside = "CON" + "TRACT"  # spelled apart so this file does not find itself
    suffixes = {".py", ".js", ".html", ".css", ".sh", ".toml", ".yml", ".cfg"}
    citing = [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*")
        if path.suffix in suffixes
        and path.is_file()
        and not {".venv", "vendor", "node_modules", ".git", ".bench-cache"} & set(path.parts)
        and re.search(rf"\b{outside}\b(?:\.md|\s*§)", path.read_text(errors="replace"))
    ]
    assert citing == []


def test_the_readme_stays_short():
    # What a newcomer needs fits in 12 KB (read as 12,000 bytes); deep dives live in docs/.
    assert (ROOT / "README.md").stat().st_size <= 12_000
