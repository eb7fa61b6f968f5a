"""Generate the small synthetic corpus shipped for tests (deterministic, a few hundred KB).

    python -m trainer.data.make_corpus --output trainer/data/corpus/tiny_corpus.jsonl

Sentences come from a tiny seeded grammar, so the text has structure a small model can learn
(the loss falls visibly within a few dozen steps) and the file is byte-identical on every run.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SUBJECTS = ["the cluster", "a node", "the trainer", "every worker", "the scheduler", "a replica",
            "the checkpoint", "the network", "an operator", "the storage tier"]
VERBS = ["restarts", "recovers", "saves", "loads", "joins", "leaves", "measures", "reports",
         "waits for", "retries"]
OBJECTS = ["the snapshot", "its peers", "the rendezvous", "a new epoch", "the gradient",
           "the shared memory", "the object store", "the local disk", "the health check", "the loss"]
TAILS = ["after a failure", "within seconds", "without losing work", "at every step",
         "before the deadline", "when the disk is full", "in the background", "from the newest tier"]


def sentence(rng: random.Random) -> str:
    s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
    if rng.random() < 0.6:
        s += " " + rng.choice(TAILS)
    return s[0].upper() + s[1:] + "."


def generate(n_docs: int = 800, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"id": i, "text": " ".join(sentence(rng) for _ in range(rng.randint(2, 6)))} for i in range(n_docs)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--docs", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(d) + "\n" for d in generate(args.docs, args.seed)))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
