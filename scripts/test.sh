#!/usr/bin/env bash
# Sets everything up, then builds and runs every test (unit and end to end).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo test --workspace --locked "$@"
