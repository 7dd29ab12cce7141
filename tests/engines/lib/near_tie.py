#!/usr/bin/env python3
"""The near-tie rule of the engine tests (tests/engines/*.sh), in one place.

Two greedy answers of one prompt (token ids) agree when they are identical
(over the shorter one), or when at their first difference the two tokens are
within TOLERANCE nats of each other in the top log-probabilities of the run
whose reply is PROBS (llama-server's /completion with n_probs): a near tie
that two computations of the same prompt may break either way.  A token
missing from those top log-probabilities is infinitely far.

Prints "GOT identical", or "GOT vs WANT: first difference at I, GAP nats"
and "near-tie" or "FAIL"; the callers' checks look for identical|near-tie.

Usage: near_tie.py --got IDS --want IDS --probs REPLY.json --probs-of got|want
                   --tolerance NATS
  IDS: token ids, a JSON list or separated by blanks or commas (not empty)
  --probs-of: the answer the PROBS run gave (its greedy token at the first
      difference is the one the other is measured from)
"""
import argparse
import json


def ids(text):
    """A JSON list of ids, or ids separated by blanks or commas.  An empty
    argument is refused: it is an answer that could not be read, which would
    otherwise compare as identical to anything."""
    if not text.strip():
        raise argparse.ArgumentTypeError("no token ids")
    if text.lstrip().startswith("["):
        return [int(t) for t in json.loads(text)]
    return [int(t) for t in text.replace(",", " ").split()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--got", type=ids, required=True)
    p.add_argument("--want", type=ids, required=True)
    p.add_argument("--probs", required=True, help="llama-server reply with completion_probabilities")
    p.add_argument("--probs-of", choices=("got", "want"), required=True)
    p.add_argument("--tolerance", type=float, required=True, help="nats")
    a = p.parse_args()
    probs = json.load(open(a.probs))["completion_probabilities"]
    got, want = a.got, a.want
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            top = {t["id"]: t["logprob"] for t in probs[i]["top_logprobs"]}
            chosen, other = (g, w) if a.probs_of == "got" else (w, g)
            gap = top[chosen] - top[other] if other in top else float("inf")
            print(f"{got} vs {want}: first difference at {i}, {gap:.3f} nats",
                  "near-tie" if gap <= a.tolerance else "FAIL")
            return
    print(f"{got} identical")


if __name__ == "__main__":
    main()
