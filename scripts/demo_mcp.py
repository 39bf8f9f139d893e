"""The demo tool server (docs/tools.md): a calculator, a clock and a notes store, served over
MCP's streamable HTTP with the official SDK (``MCPServer``). ``make run`` starts it beside the
embedded server and ``seed_demo --tools-url`` registers it.

    python scripts/demo_mcp.py --port 8765

prints ``DEMO_MCP_URL=http://127.0.0.1:8765/mcp`` once it is listening. Notes live in memory:
they are gone when it stops.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import operator
import threading
import time
import zoneinfo

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
MAX_EXPRESSION_CHARS = 200
MAX_POWER = 100


def calculate_expression(expression: str) -> float | int:
    """Arithmetic only (numbers, + - * / // % **, parentheses): never ``eval``."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"at most {MAX_EXPRESSION_CHARS} characters")

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_POWER:
                raise ToolError(f"exponents above {MAX_POWER} are refused")
            return _OPERATORS[type(node.op)](left, right)
        raise ToolError("only numbers, + - * / // % ** and parentheses")

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ToolError("not an arithmetic expression") from None
    try:
        return value(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None


def build() -> MCPServer:
    server = MCPServer("demo-tools", instructions="A calculator, a clock and a notes store.")
    notes: dict[str, str] = {}
    lock = threading.Lock()

    @server.tool()
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression, e.g. "(17 + 25) * 3"."""
        return str(calculate_expression(expression))

    @server.tool()
    def clock(timezone: str = "UTC") -> str:
        """The current date and time in an IANA time zone (default UTC)."""
        try:
            zone = zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ToolError(f"unknown time zone {timezone[:60]}") from None
        return dt.datetime.now(zone).isoformat(timespec="seconds")

    @server.tool()
    def note_save(key: str, text: str) -> str:
        """Save a note under a key (replaces an older one)."""
        with lock:
            notes[key[:100]] = text[:10_000]
        return f"saved {key[:100]}"

    @server.tool()
    def note_read(key: str) -> str:
        """Read the note saved under a key."""
        with lock:
            if key not in notes:
                raise ToolError(f"no note {key[:100]}")
            return notes[key]

    @server.tool()
    def note_list() -> list[str]:
        """The keys of every saved note."""
        with lock:
            return sorted(notes)

    return server


def serve(port: int, host: str = "127.0.0.1") -> uvicorn.Server:
    """Start the server in a thread; returns once it listens."""
    config = uvicorn.Config(
        build().streamable_http_app(), host=host, port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True, name="demo-mcp").start()
    while not server.started:
        time.sleep(0.02)
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    config = uvicorn.Config(
        build().streamable_http_app(), host=args.host, port=args.port, log_level="warning"
    )
    server = uvicorn.Server(config)

    def announce() -> None:
        while not server.started:
            time.sleep(0.02)
        print(f"DEMO_MCP_URL=http://{args.host}:{args.port}/mcp", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    server.run()


if __name__ == "__main__":
    main()
