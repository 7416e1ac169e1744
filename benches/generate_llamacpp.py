"""llama.cpp's speed on the same GGUF and prompt tokens, for `evident bench generate`.

Usage: python benches/generate_llamacpp.py MODEL.gguf ID,ID,... DECODE_TOKENS
Prints one JSON object: prompt and decode tokens/s (2 threads, CPU) and peak RSS in MiB.
"""
import json
import sys
import time

import llama_cpp
from llama_cpp import Llama

path, ids, decode = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], int(sys.argv[3])
llm = Llama(model_path=path, n_ctx=max(2048, len(ids) + decode + 8), n_threads=2, n_batch=512, verbose=False)


def run(prompt, steps):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    for _ in range(steps):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    return t1 - t0, time.perf_counter() - t1


def peak_mib():
    # VmHWM, not getrusage: the latter carries the parent's peak across exec.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


run(ids[:16], 2)  # warm-up
prompt_s, decode_s = run(ids, decode)
print(json.dumps({
    "version": getattr(llama_cpp, "__version__", "?"),
    "prompt_tps": len(ids) / prompt_s,
    "decode_tps": decode / decode_s,
    "peak_mib": peak_mib(),
}))
