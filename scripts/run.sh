#!/usr/bin/env bash
# Sets everything up, builds Evident in release mode and runs it on its embedded defaults.
# With no arguments it ingests three sample PDFs from ../shared/bench/docs (a paper, a filing,
# a report), runs a sample search, answers a sample question with cited pages, then serves the
# HTTP API and web page (`evident serve`, printing the address and a token) until Ctrl-C;
# with arguments it runs `evident ARGS...` (for example `bash scripts/run.sh ingest ../shared/bench/docs`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo build --release --locked -p evident
bash scripts/build-plugins.sh >/dev/null
EVIDENT=${CARGO_TARGET_DIR:-target}/release/evident
if [ $# -gt 0 ]; then
  exec "$EVIDENT" "$@"
fi
DOCS=../shared/bench/docs
SAMPLES=("$DOCS/mmlongbench-doc/2303.05039v2.pdf" "$DOCS/financebench/PEPSICO_2023_8K_dated-2023-05-05.pdf" "$DOCS/mmlongbench-doc/PIP_Seniors-and-Tech-Use_040314.pdf")
if [ -f "${SAMPLES[0]}" ]; then
  "$EVIDENT" ingest "${SAMPLES[@]}"
  "$EVIDENT" search "How many seniors aged 65 and older go online?" --k 3
  # The baseline profile: retrieve the top pages, answer with the embedded model, cite pages.
  "$EVIDENT" ask "What share of seniors aged 65 and older go online?" --doc PIP_Seniors --profile baseline
else
  echo "run: no sample PDFs under $DOCS; ingest your own with: $EVIDENT ingest <PDF or folder>"
fi
"$EVIDENT" docs
exec "$EVIDENT" serve
