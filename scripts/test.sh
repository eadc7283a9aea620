#!/usr/bin/env bash
# The project's test command: installs the pinned interop peers, builds every binary (the tests
# spawn them), then runs the whole workspace's tests. Extra arguments go to `cargo test`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

scripts/install-test-deps.sh

export MCP_SUPERVISOR_PYTHON="$ROOT/.venv-test/bin/python"
export MCP_SUPERVISOR_TOOLS="$ROOT/tools/node_modules/.bin"

cargo build --workspace --bins
# --no-fail-fast: one failing test binary must not hide the results of the others.
cargo test --workspace --no-fail-fast "$@"
