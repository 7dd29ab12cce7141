"""Our tokenizer against llama.cpp's on real text from the machine (licenses,
man pages, copyright files, headers) plus synthetic Unicode: ids must be
identical for every document; a mismatch is localized to its paragraph.
"""
import os, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(__file__))
from corpus import documents
import llama_cpp

from paths import ROOT, KVFSCTL, MODEL
vocab = llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)

synthetic = [
    'CJK 日本語のテキストと中文字符，한국어 문장도 있습니다。',
    'emoji 😀👍🏽🇫🇷 and ZWJ 👨‍👩‍👧‍👦 sequences',
    'combining: e\u0301 a\u0308 n\u0303, Arabic العربية, Hebrew עברית, Devanagari हिन्दी',
    'numbers 1234567890 3.14159 1,000,000 0x1F2E 2026-11-22 12:34:56',
    'whitespace  runs\t\ttabs   \n\n\n  trailing   \r\nwindows\r\nlines  ',
    "contractions: it's we're they've I'm you'll he'd DON'T",
    'code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done',
    '<|im_start|>user\nnot parsed as special without --special<|im_end|>',
]
docs = documents(260)
total = 0
texts = [(p, t) for p, t in docs] + [(f'synthetic-{i}', s) for i, s in enumerate(synthetic)]
limit = int(os.environ.get('KVFS_TOKENIZER_CORPUS_BYTES', '700000'))
mismatch = 0
with tempfile.TemporaryDirectory() as td:
    for path, text in texts:
        if total > limit and not path.startswith('synthetic'):
            continue
        data = text.encode('utf-8')
        total += len(data)
        f = os.path.join(td, 'doc.txt')
        open(f, 'wb').write(data)
        ours = subprocess.run([KVFSCTL, 'tokenize', '-m', MODEL, f], capture_output=True, text=True)
        if ours.returncode != 0:
            print(f'FAIL {path}: kvfsctl tokenize: {ours.stderr.strip()}')
            mismatch += 1
            continue
        got = [int(x) for x in ours.stdout.split()]
        ref = vocab.tokenize(data, add_bos=False, special=False)
        if got == ref:
            continue
        mismatch += 1
        print(f'FAIL {path}: {len(got)} vs {len(ref)} tokens')
        for para in text.split('\n\n'):
            pd = para.encode()
            open(f, 'wb').write(pd)
            g = [int(x) for x in subprocess.run([KVFSCTL, 'tokenize', '-m', MODEL, f], capture_output=True,
                                                 text=True).stdout.split()]
            r = vocab.tokenize(pd, add_bos=False, special=False)
            if g != r:
                print(f'  paragraph {para[:120]!r}\n  ours {g[:40]}\n  ref  {r[:40]}')
                break
print(f'{len(texts)} documents, {total} bytes, {mismatch} mismatching')
sys.exit(1 if mismatch else 0)
