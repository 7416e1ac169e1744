"""A stratified sample of the benchmark's questions, for quick comparisons (`eval --questions`).

Usage: python3 scripts/sample-questions.py [N] [SEED] > sample.jsonl
Each source gets its share of N (rounded), drawn with Python's random.sample under SEED, so the
same N and SEED give the same questions. README's model comparison used N = 60, SEED = 13.
"""
import json
import os
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 13
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench", "questions.jsonl")
questions = [json.loads(line) for line in open(path)]
random.seed(seed)
by_source = {}
for q in questions:
    by_source.setdefault(q["source"], []).append(q)
for source, items in sorted(by_source.items()):
    for q in random.sample(items, round(n * len(items) / len(questions))):
        print(json.dumps(q))
