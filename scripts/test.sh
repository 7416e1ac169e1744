#!/usr/bin/env bash
# Sets everything up, then builds and runs every test (unit and end to end).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# Mesa's Vulkan driver wants a private runtime directory; without one it complains on every start.
if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -d "$XDG_RUNTIME_DIR" ]; then
  export XDG_RUNTIME_DIR=$(mktemp -d)
  chmod 700 "$XDG_RUNTIME_DIR"
fi
# Formatting and lints first: they take seconds once built and fail for reasons a reader sees.
cargo fmt --all --check
cargo fmt --all --check --manifest-path plugins/Cargo.toml
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --manifest-path plugins/Cargo.toml --workspace --all-targets --locked -- -D warnings
# Stage plugins: their logic natively, then the components the end-to-end tests load.
cargo test --locked --manifest-path plugins/Cargo.toml
bash scripts/build-plugins.sh >/dev/null
cargo test --workspace --locked "$@"
