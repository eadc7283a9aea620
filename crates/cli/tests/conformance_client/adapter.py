"""The conformance suite's client under test: it drives `mcp-supervisor` as a user would.

The suite (`@modelcontextprotocol/conformance client --command "python adapter.py"`) starts a
test server per scenario and runs this script with the server's URL as the last argument, the
scenario's name in MCP_CONFORMANCE_SCENARIO and its data in MCP_CONFORMANCE_CONTEXT.

Two ways in, both through the real binary (MCP_SUPERVISOR_BIN):
- the CLI as a client: a config naming the URL (asking for protocol 2026-07-28, which falls back
  to the handshake where the server does not speak it), then `tools --json` and one `call` per
  listed tool;
- `wrap --url URL` on stdio, under the official Python SDK client, for the scenarios that need a
  client with callbacks (elicitation) or methods the CLI does not offer (prompts, resources):
  the supervisor relays, the Python client answers.

It asserts nothing: the suite judges what reached its server. Each step is bounded; a failing
step is reported on stderr and the script goes on, so the suite sees everything that was sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

STEP_TIMEOUT_S = 30.0
SERVER = "s"
SEPARATOR = "__"

# Scenarios driven through `wrap` under the Python client, with the mode it negotiates in.
THROUGH_WRAP = {
    "elicitation-sep1034-client-defaults": "legacy",
    "sep-2322-client-request-state": "auto",
    "http-standard-headers": "auto",
}


def log(message: str) -> None:
    print(f"adapter: {message}", file=sys.stderr, flush=True)


def binary() -> str:
    path = os.environ.get("MCP_SUPERVISOR_BIN")
    if not path:
        sys.exit("adapter: MCP_SUPERVISOR_BIN is not set (the path of the mcp-supervisor binary)")
    return path


def context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        log(f"MCP_CONFORMANCE_CONTEXT is not JSON ({e}); ignored")
        return {}
    return value if isinstance(value, dict) else {}


def run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"{argv[1]} did not finish within {STEP_TIMEOUT_S} s")
        return None
    if done.stderr:
        sys.stderr.write(done.stderr)
    if done.returncode != 0:
        log(f"{' '.join(argv[1:3])} exited {done.returncode}")
    return done


def example_value(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if "default" in schema:
        return schema["default"]
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    return {
        "string": "example",
        "integer": 1,
        "number": 1,
        "boolean": True,
        "array": [],
        "object": {},
    }.get(kind, "example")


def example_arguments(tool: dict[str, Any]) -> dict[str, Any]:
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    return {name: example_value(properties.get(name) or {}) for name in schema.get("required") or []}


def through_cli(url: str, scenario: str) -> None:
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2026-07-28")
    with tempfile.TemporaryDirectory(prefix="mcp-conformance-") as folder:
        config = os.path.join(folder, "servers.json")
        with open(config, "w") as f:
            json.dump(
                {"mcpServers": {SERVER: {"type": "http", "url": url, "protocolVersion": version}}},
                f,
            )
        # Without an OAuth client, a protected server never becomes ready: do not wait long.
        wait_ms = "3000" if scenario.startswith("auth/") else "15000"
        listed = run([binary(), "tools", "--config", config, "--json", "--wait-ms", wait_ms])
        if listed is None or listed.returncode != 0:
            return
        try:
            tools = json.loads(listed.stdout)
        except json.JSONDecodeError:
            log("`tools --json` printed no JSON")
            return
        given = {c.get("name"): c.get("arguments") or {} for c in context().get("toolCalls") or []}
        if scenario == "json-schema-2020-12-preservation":
            # The scenario asks the client to pass back the schema it was given, verbatim.
            focal = next((t for t in tools if t.get("name", "").endswith("json_schema_2020_12_tool")), None)
            if focal is not None:
                given["json_schema_echo"] = {"schema": focal.get("inputSchema")}
        for tool in tools:
            public = tool.get("name", "")
            upstream = public.split(SEPARATOR, 1)[1] if SEPARATOR in public else public
            arguments = given.get(upstream, example_arguments(tool))
            run([binary(), "call", "--config", config, public, "--args", json.dumps(arguments)])
        # Context calls to tools that were not listed still go out (the server decides).
        listed_names = {t.get("name", "").split(SEPARATOR, 1)[-1] for t in tools}
        for name, arguments in given.items():
            if name and name not in listed_names:
                run([binary(), "call", "--config", config, f"{SERVER}{SEPARATOR}{name}",
                     "--args", json.dumps(arguments)])


def through_wrap(url: str, scenario: str, mode: str) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    python = os.environ.get("MCP_SUPERVISOR_PYTHON", sys.executable)
    argv = [python, os.path.join(here, "wrapped_client.py"), scenario, "--mode", mode,
            "--", binary(), "wrap", "--url", url]
    run(argv)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: adapter.py SERVER_URL (run by the conformance suite)")
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    log(f"scenario {scenario or '(none)'} at {url}")
    if scenario in THROUGH_WRAP:
        through_wrap(url, scenario, THROUGH_WRAP[scenario])
    else:
        through_cli(url, scenario)


if __name__ == "__main__":
    main()
