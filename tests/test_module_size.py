"""Issue 31 item 4: no module over 500 lines, no function over 80 (migrations and tests aside)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", ".git", "tests", "migrations", ".bench-cache", "node_modules"}
MAX_MODULE = 500
MAX_FUNCTION = 80


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if SKIP.intersection(rel.parts[:-1]):
            continue
        yield rel, path.read_text(encoding="utf-8")


def test_no_module_over_500_lines():
    offenders = [
        f"{rel}: {len(text.splitlines())}"
        for rel, text in _sources()
        if len(text.splitlines()) > MAX_MODULE
    ]
    print("\n".join(offenders))
    assert offenders == []


def test_no_function_over_80_lines():
    offenders = []
    for rel, text in _sources():
        for node in ast.walk(ast.parse(text, filename=str(rel))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION:
                    offenders.append(f"{rel}:{node.lineno} {node.name}: {length}")
    print("\n".join(offenders))
    assert offenders == []
