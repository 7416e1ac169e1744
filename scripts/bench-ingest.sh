#!/usr/bin/env bash
# Ingest throughput beside pypdfium2, and peak memory on the largest PDF. See benches/ingest.py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >/dev/null
cargo build --release --locked -p evident
EVIDENT_BIN=${CARGO_TARGET_DIR:-target}/release/evident exec .evident/venv/bin/python benches/ingest.py "$@"
