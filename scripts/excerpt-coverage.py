#!/usr/bin/env python3
"""How often the prompt holds the answer: for each answerable question of an eval results log
whose short gold answer (a figure, or a string of at most 40 characters; not yes/no, not a list)
is printed on one of the five pages the answer read, whether each page excerpt (cut from the top,
or focused on the question's words, at each token budget) still holds it. No model is asked.

    python3 scripts/excerpt-coverage.py --results evals/dev-answers-first-excerpt.jsonl \
        --data-dir D [--evident target/release/evident] [--tokens 800,400]

The excerpts come from stage-kit's own functions, through its `excerpts` example (built here by
cargo on first use).
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def page_text(evident, data_dir, doc, page, cache):
    """The page's text as a stage reads it: lines of words, blocks separated by blank lines."""
    key = (doc, page)
    if key not in cache:
        out = subprocess.run([evident, "--data-dir", data_dir, "show", doc, "--page", str(page), "--json"], capture_output=True, text=True, check=True).stdout
        blocks = json.loads(out)["page"]["blocks"]
        cache[key] = "\n\n".join("\n".join(" ".join(w["text"] for w in line["words"]) for line in b["lines"]) for b in blocks)
    return cache[key]


def needle(answer):
    """What to look for: ('figure', digits) or ('text', lowercase words), or None."""
    answer = str(answer).strip()
    if answer.startswith("[") or len(answer) > 40:
        return None
    figures = [f.replace(",", "").rstrip(".") for f in re.findall(r"\d[\d,]*\.?\d*", answer)]
    figures = [f for f in figures if len(f) >= 2]
    if figures:
        return ("figure", figures[0])
    if answer.lower() in ("yes", "no", ""):
        return None
    return ("text", " ".join(answer.lower().split()))


def holds(text, what):
    kind, value = what
    if kind == "figure":
        return value in text.replace(",", "")
    return value in " ".join(text.lower().split())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="an eval results log (its ranked pages are the ones read)")
    ap.add_argument("--questions", default=os.path.join(ROOT, "../shared/bench/questions.jsonl"))
    ap.add_argument("--data-dir", required=True, help="the store the log's answers were read from")
    ap.add_argument("--evident", default="evident")
    ap.add_argument("--tokens", default="800,400", help="page budgets to compare")
    ap.add_argument("--pages", type=int, default=5, help="pages read per answer")
    args = ap.parse_args()

    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "plugins/target"))
    subprocess.run(["cargo", "build", "--quiet", "--release", "--manifest-path", os.path.join(ROOT, "plugins/Cargo.toml"), "-p", "stage-kit", "--example", "excerpts"], check=True)
    excerpts = os.path.join(target, "release/examples/excerpts")

    questions = {}
    with open(args.questions) as f:
        for line in f:
            q = json.loads(line)
            questions[q["qid"]] = q
    cache = {}
    cases = []  # (needle, [page texts], question)
    with open(args.results) as f:
        for line in f:
            r = json.loads(line)
            q = questions.get(r["qid"])
            if not q or not q.get("answerable", True):
                continue
            what = needle(q["answer"])
            if not what:
                continue
            doc = os.path.basename(q["doc"])
            texts = [page_text(args.evident, args.data_dir, doc, p, cache) for p in r["ranked"][: args.pages]]
            if any(holds(t, what) for t in texts):
                cases.append((what, texts, q["question"]))
    print(f"{len(cases)} answerable questions whose short gold answer is printed on one of the pages read")
    print(f"{'tokens a page':>14} {'cut from the top':>17} {'focused':>8}")
    for tokens in [int(t) for t in args.tokens.split(",")]:
        records = [f"{tokens}\x1f{question}\x1f{text}" for _, texts, question in cases for text in texts]
        out = subprocess.run([excerpts], input="\x1e".join(records), capture_output=True, text=True, check=True).stdout
        pairs = [p.split("\x1f") for p in out.split("\x1e")] if out else []
        if len(pairs) != len(records):
            sys.exit(f"the excerpts example returned {len(pairs)} records for {len(records)}")
        at = 0
        first = focused = 0
        for what, texts, _ in cases:
            chunk = pairs[at : at + len(texts)]
            at += len(texts)
            first += any(holds(p[0], what) for p in chunk)
            focused += any(holds(p[1], what) for p in chunk)
        print(f"{tokens:>14} {first:>17} {focused:>8}")


if __name__ == "__main__":
    main()
