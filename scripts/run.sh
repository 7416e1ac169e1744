#!/usr/bin/env bash
# Sets everything up, builds Evident in release mode and runs it on its embedded defaults.
# With no arguments it ingests the sample PDFs (../shared/bench/docs) and lists the store;
# with arguments it runs `evident ARGS...`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo build --release --locked -p evident
EVIDENT=${CARGO_TARGET_DIR:-target}/release/evident
if [ $# -gt 0 ]; then
  exec "$EVIDENT" "$@"
fi
SAMPLES=../shared/bench/docs
if [ -d "$SAMPLES" ]; then
  "$EVIDENT" ingest "$SAMPLES"
else
  echo "run: no sample PDFs at $SAMPLES; ingest your own with: $EVIDENT ingest <PDF or folder>"
fi
"$EVIDENT" docs
