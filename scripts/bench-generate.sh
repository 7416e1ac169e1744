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
  # On a CPU with AMX a native build takes ggml's AMX matrix products, which stop the process
  # with an illegal instruction (tilezero) on the Xeons this was measured on: build for AVX-512
  # without AMX there, and never reuse a wheel pip cached from another build.
  if grep -qw amx_tile /proc/cpuinfo; then
    export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON"
  fi
  CMAKE_BUILD_PARALLEL_LEVEL=2 "$LLAMA_VENV/bin/pip" install --no-cache-dir --quiet --no-binary llama-cpp-python llama-cpp-python==0.3.36
fi
cargo build --release --locked -p evident
exec "${CARGO_TARGET_DIR:-target}/release/evident" bench generate --python "$LLAMA_VENV/bin/python" "$@"
