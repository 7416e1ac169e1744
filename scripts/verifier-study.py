"""Does hievi's verifier order pages better than its retriever? Reads an `eval --traces` log and
the questions file, takes each answer's first verify step (the root question's window, in the
retriever's order, each page with its label and the judge's score) and prints recall at 1, 3
and 5 of four orders of the same pages: the retriever's, hievi's rerank (pages judged T first,
as the paper does), the same with T meaning a score at least the mean of the question's pages
(a threshold relative to the question), the judge's score, and the two ranks fused (reciprocal
rank fusion, k = 60).
Also the share of pages judged T and how often a gold page outscores a page that is not gold.

    python3 scripts/verifier-study.py TRACES QUESTIONS [--profile NAME]
"""

import argparse
import json
import re
import sys

ENTRY = re.compile(r"(?:(\S+) )?p(\d+) ([TF]) (-?\d+(?:\.\d+)?)")


def verdicts(output):
    """The (page, label, score) triples of a verify step's output, in the order judged."""
    _, _, listed = output.partition(": ")
    return [(int(m.group(2)), m.group(3) == "T", float(m.group(4))) for m in ENTRY.finditer(listed)]


def recall(order, gold, k):
    return len(set(order[:k]) & gold) / len(gold)


def orders(judged):
    retrieval = [p for p, _, _ in judged]
    t_first = [p for p, t, _ in judged if t] + [p for p, t, _ in judged if not t]
    by_score = [p for p, _, _ in sorted(judged, key=lambda v: -v[2])]
    rank_r = {p: i for i, p in enumerate(retrieval)}
    rank_s = {p: i for i, p in enumerate(by_score)}
    fused = sorted(retrieval, key=lambda p: -(1 / (61 + rank_r[p]) + 1 / (61 + rank_s[p])))
    mean = sum(s for _, _, s in judged) / len(judged)
    above = [p for p, _, s in judged if s >= mean] + [p for p, _, s in judged if s < mean]
    return {
        "retrieval": retrieval,
        "T first (rerank)": t_first,
        "T first, T = score at least the question's mean": above,
        "score": by_score,
        "fused": fused,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces")
    ap.add_argument("questions")
    ap.add_argument("--profile")
    args = ap.parse_args()
    gold = {}
    for line in open(args.questions):
        q = json.loads(line)
        if q.get("answerable") and q.get("evidence_pages"):
            gold[q["qid"]] = set(q["evidence_pages"])
    rows, pairs, wins, retrieval_wins, judged_t, judged_n = [], 0, 0.0, 0.0, 0, 0
    for line in open(args.traces):
        r = json.loads(line)
        if args.profile and r["profile"] != args.profile or r["qid"] not in gold:
            continue
        step = next((s for s in r["trace"] if s["stage"] == "verify"), None)
        if step is None:
            continue
        judged = verdicts(step["output"])
        g = gold[r["qid"]]
        judged_t += sum(t for _, t, _ in judged)
        judged_n += len(judged)
        scores = [(p in g, s, -i) for i, (p, _, s) in enumerate(judged)]
        for is_gold, s, r in scores:
            if not is_gold:
                continue
            for other_gold, o, q in scores:
                if not other_gold:
                    pairs += 1
                    wins += 1.0 if s > o else 0.5 if s == o else 0.0
                    retrieval_wins += 1.0 if r > q else 0.0
        rows.append({name: [recall(o, g, k) for k in (1, 3, 5)] for name, o in orders(judged).items()})
    if not rows:
        sys.exit("no traced answer with gold pages and a verify step")
    print(f"{len(rows)} questions with gold pages; {judged_t} of {judged_n} pages judged T")
    if pairs:
        print(f"a gold page outscores a page that is not gold in {wins / pairs:.3f} of {pairs} pairs (0.5 is chance);")
        print(f"the retriever put the gold page first in {retrieval_wins / pairs:.3f} of them")
    print("| order | R@1 | R@3 | R@5 |\n| --- | ---: | ---: | ---: |")
    for name in rows[0]:
        means = [sum(r[name][i] for r in rows) / len(rows) for i in range(3)]
        print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in means) + " |")


if __name__ == "__main__":
    main()
