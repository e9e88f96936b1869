"""The outside world only through `mindsearch/clients/` (docs/ARCHITECTURE.md, "Rules"): no
application module elsewhere imports an HTTP client library or the MCP SDK's client side, read
off the source (at a module's top or inside a function). MindSearch's own MCP server
(`mcp.server`) and the SDK's data types (`mcp.types`) are not outside calls."""

from __future__ import annotations

import ast

from tests.support.code import ROOT, application_modules

CLIENTS = "mindsearch/clients/"
# Libraries that send requests to other hosts; `mcp` is the SDK's own top level (`Client`, the
# client sessions), `mcp.client` its transports.
CALLING_OUT = (
    "httpx",
    "httpx2",
    "httpcore",
    "openai",
    "requests",
    "aiohttp",
    "urllib3",
    "urllib.request",
    "http.client",
)
MCP_CLIENT = ("mcp", "mcp.client")
# The SDK's parts that send nothing anywhere: its data types and the server side.
MCP_STAYING_IN = ("mcp.types", "mcp.server")


def _is_or_under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def calls_out(module: str) -> bool:
    """Whether importing `module` (or a name from it) brings in a way to call another host."""
    if _is_or_under(module, MCP_STAYING_IN):
        return False
    return module in MCP_CLIENT or module.startswith("mcp.client.") or _is_or_under(module, CALLING_OUT)


def outside_imports(source: str) -> list[str]:
    """The modules `source` imports that call out: `import a.b` is `a.b`; `from a import b` is
    `a`, or `a.b` when only that is one (`from urllib import request`), and nothing when `a.b` is
    a part that stays in (`from mcp import types`)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if calls_out(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if _is_or_under(full, MCP_STAYING_IN):
                    continue
                name = module if calls_out(module) else full if calls_out(full) else ""
                if name and name not in found:
                    found.append(name)
    return found


def test_only_the_clients_import_a_way_to_call_out() -> None:
    strays = []
    for path in application_modules():
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(CLIENTS):
            continue
        for module in outside_imports(path.read_text()):
            strays.append(f"{relative} imports {module}")
    assert strays == [], "call the service through its client in mindsearch/clients/"


def test_the_rule_sees_every_form_of_import() -> None:
    source = """
import httpx
import urllib.request as fetcher
from httpx2 import AsyncClient
from openai import AsyncOpenAI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from urllib import request
from http import client
from mcp import types, ClientSession
import httpcore


def later():
    import requests
"""
    found = set(outside_imports(source))
    assert {"httpx", "urllib.request", "httpx2", "openai", "mcp", "mcp.client.streamable_http"} <= found
    assert {"urllib.request", "http.client", "requests", "httpcore"} <= found
    assert outside_imports("from mcp import types, ClientSession") == ["mcp"]


def test_the_rule_lets_the_own_server_and_plain_modules_be() -> None:
    source = """
import socket
import urllib.parse
from urllib.parse import urljoin
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from mcp import types
from mcp import server as mcp_server
from mindsearch.clients import mcp, llm
from http import HTTPStatus
"""
    assert outside_imports(source) == []


def test_the_clients_do_call_out() -> None:
    """The rule has something to guard: the clients are where those imports live."""
    clients = sorted((ROOT / CLIENTS).glob("*.py"))
    assert {"httpx", "httpcore", "mcp"} <= {
        module for path in clients for module in outside_imports(path.read_text())
    }
