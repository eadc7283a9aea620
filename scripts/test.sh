#!/usr/bin/env bash
# The project's test command: installs the pinned interop peers, builds every binary (the tests
# spawn them), then runs the whole workspace's tests. Extra arguments go to `cargo test`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

scripts/install-test-deps.sh

export MCP_SUPERVISOR_PYTHON="$ROOT/.venv-test/bin/python"
export MCP_SUPERVISOR_TOOLS="$ROOT/tools/node_modules/.bin"
# serve and wrap save each server's catalog under the user's cache dir: the tests get a cache of
# their own, empty at each run, so no run starts warm from an earlier one and nothing is written
# to the user's.
export XDG_CACHE_HOME="$ROOT/target/test-cache"
rm -rf "$XDG_CACHE_HOME"
mkdir -p "$XDG_CACHE_HOME"
# Every serve and wrap registers in the user's runtime directory (`mcp-supervisor dashboard`):
# the tests' proxies register in a folder of their own, so a developer's dashboard never lists
# them and the entries a test's SIGKILL leaves behind go with the next run.
export XDG_RUNTIME_DIR="$ROOT/target/test-runtime"
rm -rf "$XDG_RUNTIME_DIR"
mkdir -p -m 0700 "$XDG_RUNTIME_DIR"

cargo build --workspace --bins
# The library crates' docs build without a warning (a broken or private intra-doc link fails).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features \
    -p mcp-supervisor-core -p mcp-supervisor -p mcp-supervisor-front
# --no-fail-fast: one failing test binary must not hide the results of the others.
cargo test --workspace --no-fail-fast "$@"
