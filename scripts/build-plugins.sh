#!/usr/bin/env bash
# Builds the stage plugins (plugins/, a workspace of wasm32-wasip2 components) and installs the
# components as .evident/plugins/<name>.wasm, where the appliance's profiles find them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EVIDENT_HOME="${EVIDENT_HOME:-$PWD/.evident}"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --locked --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml "$@"
out="${CARGO_TARGET_DIR:-plugins/target}/wasm32-wasip2/release"
# Components made only for the tests (test-*) go to test-plugins/, away from the real ones.
mkdir -p "$EVIDENT_HOME/plugins" "$EVIDENT_HOME/test-plugins"
for wasm in "$out"/*.wasm; do
  name="$(basename "$wasm" .wasm)"
  name="${name//_/-}"
  case "$name" in
    test-*) cp "$wasm" "$EVIDENT_HOME/test-plugins/$name.wasm" ;;
    *) cp "$wasm" "$EVIDENT_HOME/plugins/$name.wasm" ;;
  esac
done
ls "$EVIDENT_HOME/plugins" "$EVIDENT_HOME/test-plugins"
