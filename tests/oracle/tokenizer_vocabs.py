"""kvfs's tokenizer against llama.cpp's own expected ids for the vocabularies
of real models that llama.cpp's source carries (models/ggml-vocab-*.gguf with
their .inp/.out cases, what llama.cpp's test-tokenizer-0 checks: no BOS, no
special-token parsing).  Every vocabulary kvfs loads must give llama.cpp's ids
on every case; one it does not handle must be refused at load with the reason
(a tokenizer model or pre-tokenizer kvfs lacks), never tokenize wrong.  Prints
a line per vocabulary."""
import glob, os, subprocess, sys
sys.path.insert(0, os.path.dirname(__file__))
from paths import ROOT, KVFSCTL

dirs = sorted(glob.glob(os.path.join(ROOT, 'build', 'third_party', 'llama_cpp_python-*', 'vendor', 'llama.cpp',
                                     'models')))
if not dirs:
    print('skip: llama.cpp source not unpacked (tools/install-oracle.sh)')
    sys.exit(77)
SEP = '\n__ggml_vocab_test__\n'
# what kvfs tokenizes today (a refusal of one of these is a failure, not a refusal)
MUST = {'gpt-2', 'llama-bpe', 'llama-spm', 'phi-3', 'qwen2', 'command-r', 'refact', 'starcoder', 'mpt', 'falcon',
        'qwen35', 'deepseek-coder', 'deepseek-llm'}
fails = supported = refused = 0
seen = set()
for inp in sorted(glob.glob(os.path.join(dirs[-1], 'ggml-vocab-*.gguf.inp'))):
    vocab, out = inp[:-4], inp[:-4] + '.out'
    name = os.path.basename(vocab)[len('ggml-vocab-'):-len('.gguf')]
    seen.add(name)
    raw = open(inp, encoding='utf-8', newline='').read()
    cases = raw.split(SEP)
    if cases and cases[-1] == '':
        cases.pop()
    want = [[int(t) for t in line.split()] for line in open(out).read().split('\n')[:len(cases)]]
    probe = subprocess.run([KVFSCTL, 'tokenize', '-m', vocab, '-'], input=b'x', capture_output=True)
    if probe.returncode != 0:
        msg = probe.stderr.decode().strip()
        ok = 'not supported' in msg and name not in MUST
        refused += ok
        fails += not ok
        print(f'{"ok  " if ok else "FAIL"} {name:16s} refused: {msg[:150]}')
        continue
    bad = []
    for i, (text, ids) in enumerate(zip(cases, want)):
        r = subprocess.run([KVFSCTL, 'tokenize', '-m', vocab, '-'], input=text.encode('utf-8'), capture_output=True)
        got = [int(t) for t in r.stdout.split()] if r.returncode == 0 else None
        if got != ids:
            bad.append((i, text, got, ids))
    supported += 1
    fails += bool(bad)
    print(f'{"ok  " if not bad else "FAIL"} {name:16s} {len(cases) - len(bad)}/{len(cases)} cases as llama.cpp')
    for i, text, got, ids in bad[:3]:
        print(f'      case {i} {text[:40]!r}: kvfs {got} llama.cpp {ids}')
if MUST - seen:
    print(f'FAIL: llama.cpp\'s source lacks the cases of {sorted(MUST - seen)}')
    fails += 1
print(f'{supported} vocabularies tokenized as llama.cpp, {refused} refused with the reason')
print('PASS' if not fails else f'{fails} failures')
sys.exit(1 if fails else 0)
