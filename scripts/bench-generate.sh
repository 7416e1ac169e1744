#!/usr/bin/env bash
# Generator speed (prompt and decode tokens/s, peak memory) on each backend, beside llama.cpp on
# the same GGUF. Builds llama-cpp-python from its PyPI source distribution once (several minutes:
# it compiles llama.cpp for this CPU), then runs `evident bench generate`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >/dev/null
LLAMA_VENV=.evident/llamacpp-venv
if ! "$LLAMA_VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$LLAMA_VENV"
  CMAKE_BUILD_PARALLEL_LEVEL=2 "$LLAMA_VENV/bin/pip" install --quiet --no-binary llama-cpp-python llama-cpp-python==0.3.36
fi
cargo build --release --locked -p evident
exec "${CARGO_TARGET_DIR:-target}/release/evident" bench generate --python "$LLAMA_VENV/bin/python" "$@"
