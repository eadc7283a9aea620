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

For `auth/*` scenarios the config gets an `oauth` block as a user would write it (the
scenario's pre-registered client, or the machine grant, and a client metadata URL), the token
file goes to the scenario's folder, and `mcp-supervisor login --no-browser` runs first: a browser
stand-in here follows the URL it prints (the suite's authorization server approves at once and
redirects to the loopback address `login` listens on). A step that answers "run
`mcp-supervisor login`" (step-up scope, a new authorization server) gets a new login and one
more try, at most twice in all.

It asserts nothing: the suite judges what reached its server. Each step is bounded; a failing
step is reported on stderr and the script goes on, so the suite sees everything that was sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
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


# For auth/* scenarios: the environment every mcp-supervisor step runs with (the token file in
# the scenario's folder, and the client secret the config names by variable).
STEP_ENV: dict[str, str] | None = None
# The URL the adapter gives as this client's metadata document (used where the authorization
# server supports client ID metadata documents; the suite's server knows this one).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
SECRET_VAR = "MCP_CONFORMANCE_CLIENT_SECRET"
# How many times a step may send the user back to `login` (expired grant, new scope, new
# authorization server) before the adapter gives up.
MAX_RELOGINS = 2


def run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                              env=STEP_ENV)
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


def browser_stand_in(authorization_url: str) -> None:
    """What a person's browser does against an authorization server that approves at once:
    GET the authorization URL without following redirects, then GET the Location it sends
    (the loopback redirect that `login` listens on)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(authorization_url, timeout=STEP_TIMEOUT_S)
        log("the authorization URL did not redirect")
        return
    except urllib.error.HTTPError as e:
        location = e.headers.get("Location")
    except OSError as e:
        log(f"the authorization URL failed: {e}")
        return
    if not location:
        log("the authorization server sent no Location")
        return
    try:
        urllib.request.urlopen(location, timeout=STEP_TIMEOUT_S).read()
    except OSError as e:
        log(f"the redirect to {location.split('?')[0]} failed: {e}")


def login(config: str) -> bool:
    """`mcp-supervisor login --no-browser`, its printed URL followed by the browser stand-in."""
    argv = [binary(), "login", SERVER, "--config", config, "--no-browser", "--wait-ms", "20000"]
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=STEP_ENV)
    except OSError as e:
        log(f"login did not start: {e}")
        return False
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if line.startswith("http"):
            browser_stand_in(line)
        out, err = child.communicate(timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        log("login did not finish")
    if err:
        sys.stderr.write(err)
    if child.returncode != 0:
        log(f"login exited {child.returncode}")
    return child.returncode == 0


def asks_for_login(done: subprocess.CompletedProcess[str] | None) -> bool:
    return done is not None and "mcp-supervisor login" in (done.stderr or "")


def through_cli(url: str, scenario: str) -> None:
    global STEP_ENV
    with tempfile.TemporaryDirectory(prefix="mcp-conformance-") as folder:
        config = os.path.join(folder, "servers.json")
        # No protocolVersion, as a user writes it: the client's default era (discover first,
        # then the handshake) must reach whichever era the scenario's server speaks.
        server: dict[str, Any] = {"type": "http", "url": url}
        protected = scenario.startswith("auth/")
        machine = "client-credentials" in scenario
        if protected:
            # As a user configures a protected server: a pre-registered client when the
            # scenario hands one out (its secret in the environment), a client metadata URL
            # otherwise, and the machine grant for the client-credentials scenarios.
            ctx = context()
            oauth: dict[str, Any] = {"clientMetadataUrl": CLIENT_METADATA_URL}
            STEP_ENV = dict(os.environ)
            STEP_ENV["MCP_SUPERVISOR_TOKEN_FILE"] = os.path.join(folder, "tokens.json")
            if ctx.get("client_id"):
                oauth["clientId"] = ctx["client_id"]
                if ctx.get("client_secret"):
                    oauth["clientSecretEnv"] = SECRET_VAR
                    STEP_ENV[SECRET_VAR] = ctx["client_secret"]
            if machine:
                oauth["grant"] = "client_credentials"
            server["oauth"] = oauth
        with open(config, "w") as f:
            json.dump({"mcpServers": {SERVER: server}}, f)
        relogins = [0]

        def step(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
            """A step; when it sends the user back to `login`, sign in and try it again."""
            done = run(argv)
            while protected and not machine and asks_for_login(done) and relogins[0] < MAX_RELOGINS:
                relogins[0] += 1
                if not login(config):
                    break
                done = run(argv)
            return done

        if protected and not machine:
            login(config)
        listed = step([binary(), "tools", "--config", config, "--json", "--wait-ms", "15000"])
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
            step([binary(), "call", "--config", config, public, "--args", json.dumps(arguments)])
        # Context calls to tools that were not listed still go out (the server decides).
        listed_names = {t.get("name", "").split(SEPARATOR, 1)[-1] for t in tools}
        for name, arguments in given.items():
            if name and name not in listed_names:
                step([binary(), "call", "--config", config, f"{SERVER}{SEPARATOR}{name}",
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
