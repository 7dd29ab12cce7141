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
