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


def _package_descriptions():
    """Debian package descriptions (dpkg's status file): 'name: synopsis. text'."""
    out, name, desc = [], None, None
    try:
        lines = open('/var/lib/dpkg/status', encoding='utf-8').read().splitlines()
    except OSError:
        return out
    for line in lines + ['']:
        if line.startswith('Package: '):
            name = line[9:]
        elif line.startswith('Description: '):
            desc = [line[13:].strip() + '.']
        elif desc is not None and line.startswith(' '):
            t = line.strip()
            if t != '.' and not t.startswith(('-', '*')):
                desc.append(t)
        else:
            if desc is not None and name:
                out.append(f'{name}: ' + ' '.join(desc))
            desc = None
    return out


def _license_clauses():
    out = []
    for p in sorted(glob.glob('/usr/share/common-licenses/*')):
        try:
            text = open(p, encoding='utf-8').read()
        except (OSError, UnicodeDecodeError):
            continue
        out += [' '.join(par.split()) for par in text.split('\n\n')]
    return out


def short_passages(n_prompts, lo=130, hi=480):
    """3 to 8 short passages (lo..hi bytes: about 30-120 tokens) for each of
    n_prompts prompts: package descriptions and license clauses, cut at a
    sentence end, distinct, in a fixed pseudo-random order."""
    import random
    pool, seen = [], set()
    for text in _package_descriptions() + _license_clauses():
        if len(text) > hi:
            cut = text.rfind('. ', lo, hi)
            text = text[:cut + 1] if cut > 0 else ''
        if lo <= len(text) <= hi and text not in seen:
            seen.add(text)
            pool.append(text)
    random.Random(21).shuffle(pool)
    prompts, j = [], 0
    for p in range(n_prompts):
        k = 3 + p % 6
        prompts.append([pool[(j + i) % len(pool)] for i in range(k)])
        j += k
    return prompts
