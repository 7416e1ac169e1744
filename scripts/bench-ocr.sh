#!/usr/bin/env bash
# OCR quality and speed on born-digital benchmark pages, beside Tesseract 5 on the same images:
# `evident bench ocr` (its --help says how pages are chosen and scored). Installs Debian's
# tesseract-ocr and tesseract-ocr-eng when missing (as root), and builds the binary the tests
# build (dependencies, burn among them, at opt-level 3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >/dev/null
if ! command -v tesseract >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tesseract-ocr tesseract-ocr-eng >/dev/null
  else
    echo "Tesseract is missing: install tesseract-ocr and tesseract-ocr-eng, or pass --no-tesseract" >&2
  fi
fi
cargo build --locked -p evident
# PDFs or folders first; without them, the benchmark's documents.
case "${1:-}" in ""|-*) set -- ../shared/bench/docs "$@" ;; esac
exec "${CARGO_TARGET_DIR:-target}/debug/evident" bench ocr "$@"
