"""Real text found on the machine, for oracle tests: licenses, man pages,
documentation and headers.  Deterministic order so runs are comparable."""
import glob, gzip, os

def documents(max_docs=400):
    paths = sorted(glob.glob('/usr/share/common-licenses/*'))
    paths += sorted(glob.glob('/usr/share/man/man1/*.1.gz'))[:120]
    paths += sorted(glob.glob('/usr/share/doc/*/copyright'))[:120]
    paths += sorted(glob.glob('/usr/include/*.h'))[:80]
    out = []
    for p in paths:
        if not os.path.isfile(p):
            continue
        try:
            raw = gzip.open(p).read() if p.endswith('.gz') else open(p, 'rb').read()
            text = raw.decode('utf-8')
        except Exception:
            continue
        if len(text) > 400:
            out.append((p, text))
        if len(out) >= max_docs:
            break
    return out


def _shingles(text, n=8):
    words = text.split()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def rag_passages(n_prompts, k, size, distinct=True, max_overlap=0.3):
    """k passages of ~size bytes for each of n_prompts RAG-like prompts.

    A retriever returns distinct passages: with distinct, identical documents
    (symlinked licenses, the same copyright file in several packages) count
    once, and a passage sharing more than max_overlap of its 8-word shingles
    with one already in the prompt is skipped for the next document.  Without
    it, documents are taken in order, repeats included (the set measured
    before 2026-11-23 14:00)."""
    docs, seen = [], set()
    for _, text in documents(400):
        if len(text) > size + 200 and (not distinct or text not in seen):
            seen.add(text)
            docs.append(text)
    prompts = []
    for p in range(n_prompts):
        passages, grams = [], []
        j = p * k
        while len(passages) < k and j < p * k + len(docs):
            text = docs[j % len(docs)]
            j += 1
            off = (p * 997) % max(1, len(text) - size)
            passage = text[off:off + size]
            g = _shingles(passage)
            if distinct and any(g and h and len(g & h) > max_overlap * min(len(g), len(h)) for h in grams):
                continue
            passages.append(passage)
            grams.append(g)
        prompts.append(passages)
    return prompts
