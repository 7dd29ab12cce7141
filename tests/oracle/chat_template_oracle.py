"""kvfsctl's --chat against llama.cpp (llama-cpp-python, the same GGUFs).

1. Every built-in family llama.cpp names (llama_chat_builtin_templates), as
   --chat-template NAME on a vocabulary: the token ids of [user] and
   [system, user], with the generation prompt, BOS where the vocabulary asks
   for it and control tokens parsed, are those of libllama's
   llama_chat_apply_template rendering tokenized by llama.cpp -- or kvfs
   refuses the family as one it does not render (never FAMILIES_MUST).
2. Detection: the real templates llama.cpp's source carries
   (models/templates/*.jinja, the ggml-vocab GGUFs' tokenizer.chat_template)
   as template text: kvfs renders what llama_chat_apply_template renders,
   refuses what it does not recognise, names the family it does not render.
3. The truth users see (llama-server --jinja, llama-cpp-python's
   create_chat_completion): the template's own Jinja rendering
   (Jinja2ChatFormatter; the leading BOS text stripped and BOS added as
   the vocabulary asks, as llama.cpp's common/chat.cpp does) gives the same
   ids for SmolLM2's GGUF and the templates in JINJA_MUST.
4. Greedy: kvfsctl generate --chat on SmolLM2 answers as llama.cpp does from
   its chat prompt (near-tie rule of bos_oracle.py), and so does the chunk
   prefill --chat stores (generate --kv); eval --chat's prompt is the chat
   around the chunks and the query.
5. Refusals: an unknown template, a GGUF without one (Gemma 3 270M base),
   --system without --chat.
Prints each comparison."""
import ctypes, glob, os, subprocess, sys, tempfile
import numpy as np
sys.path.insert(0, os.path.dirname(__file__))
from paths import ROOT, KVFSCTL, SMOLLM2, GEMMA3
from llama_oracle import last_logprobs

import llama_cpp
from llama_cpp import llama_cpp as L
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

LLAMA = sorted(glob.glob(os.path.join(ROOT, 'build', 'third_party', 'llama_cpp_python-*', 'vendor', 'llama.cpp')))
if not LLAMA:
    print('skip: llama.cpp source not unpacked (tools/install-oracle.sh)')
    sys.exit(77)
VOCABS = os.path.join(LLAMA[-1], 'models')
TEMPLATES = os.path.join(VOCABS, 'templates')
# families the issue asks for (the architectures kvfs runs and their kin): a refusal is a failure
FAMILIES_MUST = {'chatml', 'gemma', 'llama3', 'mistral-v7', 'mistral-v7-tekken', 'phi3', 'phi4', 'granite',
                 'granite-4.0', 'granite-4.1', 'llama2', 'llama2-sys', 'mistral-v1', 'mistral-v3',
                 'mistral-v3-tekken', 'command-r', 'deepseek', 'deepseek2', 'deepseek3', 'llama4', 'zephyr',
                 'vicuna', 'exaone3', 'falcon3', 'gpt-oss'}
# real templates whose Jinja rendering the built-in path must give, for [user] (1) and [system, user]
# (2): SmolLM2's and Qwen's default system message included; Gemma 2's Jinja refuses a system turn,
# the first Phi-3's drops it.  The others' Jinja adds what no built-in family writes (Llama 3.1's
# date header, Granite's default system text, ...): printed, not checked
JINJA_MUST = {'SmolLM2 GGUF': {1, 2}, 'ggml-vocab-qwen2': {1, 2}, 'ggml-vocab-qwen35': {1, 2},
              'ggml-vocab-phi-3': {1}, 'Qwen-Qwen2.5-7B-Instruct': {1, 2}, 'Qwen-Qwen3-0.6B': {1, 2},
              'google-gemma-2-2b-it': {1}, 'microsoft-Phi-3.5-mini-instruct': {1, 2}}
# which vocabulary a family's special tokens live in (llama-spm otherwise: SentencePiece, BOS added)
FAMILY_VOCAB = {'chatml': 'qwen2', 'phi3': 'phi-3', 'llama3': 'llama-bpe', 'command-r': 'command-r',
                'deepseek': 'deepseek-coder', 'deepseek2': 'deepseek-llm', 'deepseek3': 'deepseek-llm',
                'gemma': GEMMA3, 'smolvlm': SMOLLM2}
USER, SYSTEM = 'What is the capital of France? ', '  You answer in one word.\n'
failed = 0


def vocab_path(v):
    return v if os.path.isabs(v) else os.path.join(VOCABS, f'ggml-vocab-{v}.gguf')


_vocabs = {}


def vocab(path):
    if path not in _vocabs:
        _vocabs[path] = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    return _vocabs[path]


def builtin(tmpl, msgs):
    """libllama's llama_chat_apply_template (add_ass); None if it does not know the template"""
    arr = (L.llama_chat_message * len(msgs))(*[L.llama_chat_message(role=r.encode(), content=c.encode())
                                               for r, c in msgs])
    n = L.llama_chat_apply_template(tmpl.encode(), arr, len(msgs), True, None, 0)
    if n < 0:
        return None
    buf = ctypes.create_string_buffer(n + 1)
    L.llama_chat_apply_template(tmpl.encode(), arr, len(msgs), True, buf, n + 1)
    return buf.raw[:n].decode()


def llama_ids(path, text):
    """as llama-server tokenizes a rendered chat: BOS as the vocabulary asks, control tokens parsed"""
    return vocab(path).tokenize(text.encode(), add_bos=True, special=True)


def jinja_ids(path, tmpl, msgs):
    """the template's Jinja rendering; a leading BOS text is stripped where the vocabulary adds BOS
    (common/chat.cpp), so the BOS is never doubled"""
    llm = vocab(path)
    tok = lambda i: llm._model.token_get_text(i) if i >= 0 else ''
    bos, eos = tok(llm.token_bos()), tok(llm.token_eos())
    text = Jinja2ChatFormatter(tmpl, eos_token=eos, bos_token=bos)(
        messages=[{'role': r, 'content': c} for r, c in msgs]).prompt
    if llm._model.add_bos_token() and bos and text.startswith(bos):
        text = text[len(bos):]
    return llm.tokenize(text.encode(), add_bos=True, special=True)


def kvfs(path, msgs, tmpl=None, extra=()):
    """kvfsctl tokenize --chat: (ids or None, stderr)"""
    args = [KVFSCTL, 'tokenize', '-m', path, '--bos', '--chat'] + list(extra)
    if tmpl is not None:
        args += ['--chat-template', tmpl]
    sys_ = [c for r, c in msgs if r == 'system']
    if sys_:
        args += ['--system', sys_[0]]
    user = [c for r, c in msgs if r == 'user'][0]
    r = subprocess.run(args + ['-'], input=user.encode(), capture_output=True)
    return ([int(x) for x in r.stdout.split()] if r.returncode == 0 else None), r.stderr.decode().strip()


def report(ok, line):
    global failed
    failed += not ok
    print(f'{"ok  " if ok else "FAIL"} {line}')


CONVS = [[('user', USER)], [('system', SYSTEM), ('user', USER)]]

# 1. the built-in families by name
names = (ctypes.c_char_p * 128)()
n_names = L.llama_chat_builtin_templates(names, 128)
rendered = refused = 0
for name in sorted(names[i].decode() for i in range(n_names)):
    for v in dict.fromkeys([FAMILY_VOCAB.get(name, 'llama-spm'), 'llama-bpe']):
        path = vocab_path(v)
        if not os.path.exists(path):
            continue
        for msgs in CONVS:
            got, err = kvfs(path, msgs, name)
            if got is None and 'does not render' in err:
                report(name not in FAMILIES_MUST, f'{name:18s} refused: {err}')
                refused += 1
                break
            want = llama_ids(path, builtin(name, msgs))
            rendered += 1
            report(got == want, f'{name:18s} {os.path.basename(path)} {len(msgs)} msgs: '
                   + ('same ids' if got == want else f'kvfs {got} ({err}) llama.cpp {want}'))
        else:
            continue
        break
print(f'-- {rendered} built-in renderings compared, {refused} families refused as not rendered')

# 2. detection on real templates, 3. their Jinja rendering
reals = []
for f in sorted(glob.glob(os.path.join(TEMPLATES, '*.jinja'))):
    reals.append((os.path.basename(f)[:-6], open(f, encoding='utf-8').read(), None))
for v in sorted(glob.glob(os.path.join(VOCABS, 'ggml-vocab-*.gguf'))) + [SMOLLM2]:
    if not os.path.exists(v):
        continue
    t = vocab(v).metadata.get('tokenizer.chat_template')
    if t:  # on its own vocabulary if kvfs tokenizes it (not Gemma 4's), as text otherwise
        own = subprocess.run([KVFSCTL, 'tokenize', '-m', v, '-'], input=b'x', capture_output=True).returncode == 0
        reals.append(('SmolLM2 GGUF' if v == SMOLLM2 else os.path.basename(v)[:-5], t, v if own else None))
for name, tmpl, own in reals:
    low = name.lower()
    path = own or vocab_path('qwen2' if 'qwen' in low else 'phi-3' if 'phi-3' in low else 'llama-bpe' if 'llama-3' in
                             low else GEMMA3 if 'gemma-2' in low else 'llama-spm')
    for msgs in CONVS:
        got, err = kvfs(path, msgs, None if own else tmpl)
        want_text = builtin(tmpl, msgs)
        if want_text is None:
            report(got is None and 'not recognised' in err, f'{name:40s} unknown to llama.cpp: kvfs '
                   + (err if got is None else f'rendered {got}'))
            break
        if got is None and 'does not render' in err:
            report(True, f'{name:40s} {err}')
            break
        want = llama_ids(path, want_text)
        # the built-in path adds no default system message; kvfs does where the template writes one
        exact = got == want
        try:
            jin = jinja_ids(path, tmpl, msgs)
        except Exception as e:  # a template raising (Gemma 2: no system role) or using what the formatter lacks
            jin = f'raises {type(e).__name__}: {str(e)[:60]}'
        if len(msgs) in JINJA_MUST.get(name, ()):
            ok = got == jin
            report(ok, f'{name:40s} {len(msgs)} msgs: ' + ('ids as its Jinja gives' if ok else
                   f'kvfs {got} Jinja {jin} built-in {want}'))
        else:
            ok = exact or (msgs[0][0] != 'system' and got == jin)
            report(ok, f'{name:40s} {len(msgs)} msgs: ' + ('ids as llama_chat_apply_template' if exact else
                   'ids as its Jinja' if ok else f'kvfs {got} built-in {want}') +
                   ('' if got == jin else ' (its Jinja differs)'))

# 4. greedy answers on SmolLM2's chat prompt
N, NEAR_TIE = 12, 0.5
if os.path.exists(SMOLLM2):
    llm = llama_cpp.Llama(model_path=SMOLLM2, n_ctx=512, n_threads=os.cpu_count(), verbose=False)
    for msgs in CONVS + [[('user', 'Write a haiku about the sea.')]]:
        ids = jinja_ids(SMOLLM2, llm.metadata['tokenizer.chat_template'], msgs)
        llm.reset()
        llm.eval(ids)
        want, lps = [], []
        for _ in range(N):
            lp = last_logprobs(llm)
            t = int(np.argmax(lp))
            want.append(t)
            lps.append(lp)
            if llm.token_eos() == t:
                break
            llm.eval([t])
        sys_ = [a for r, c in msgs if r == 'system' for a in ('--system', c)]
        user = [c for r, c in msgs if r == 'user'][0]
        r = subprocess.run([KVFSCTL, 'generate', '-m', SMOLLM2, '--chat', '-p', user, '-n', str(N), '--ids'] + sys_,
                           capture_output=True, text=True)
        got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
        first = next((i for i, (a, b) in enumerate(zip(got or [], want)) if a != b), None)
        if got == want:
            verdict, ok = 'identical', True
        elif got and first is not None and lps[first][want[first]] - lps[first][got[first]] <= NEAR_TIE:
            verdict, ok = f'near-tie at {first} ({lps[first][want[first]] - lps[first][got[first]]:.3f} nats)', True
        else:
            verdict, ok = f'kvfs {got} ({r.stderr.strip()[-200:]})', False
        report(ok, f'generate --chat SmolLM2 {len(msgs)} msgs {user!r}: llama.cpp {want}: {verdict}')
        # the same chat prefilled into a chunk, answered from it
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, 'q.txt'), 'w') as f:
                f.write(user)
            p = subprocess.run([KVFSCTL, 'prefill', '-m', SMOLLM2, '--chat', '-o', os.path.join(d, 'q.kv'),
                                os.path.join(d, 'q.txt')] + sys_, capture_output=True, text=True)
            r2 = subprocess.run([KVFSCTL, 'generate', '-m', SMOLLM2, '--kv', os.path.join(d, 'q.kv'), '-n', str(N),
                                 '--ids'], capture_output=True, text=True)
            kv = [int(x) for x in r2.stdout.split()] if p.returncode == 0 and r2.returncode == 0 else None
            report(kv == got, f'prefill --chat, generate --kv: {kv if kv != got else "as generate --chat"}'
                   + ('' if kv == got else f' ({p.stderr.strip()[-200:]} {r2.stderr.strip()[-200:]})'))
    # eval --chat: the chunks and the query are the user's turn, what precedes it the shared prefix
    tmpl = llm.metadata['tokenizer.chat_template']
    text = Jinja2ChatFormatter(tmpl, eos_token='', bos_token='')(messages=[{'role': 'user', 'content': '\x01'}]).prompt
    head, tail = text.split('\x01')
    query = 'What is the capital of Germany?'
    with tempfile.TemporaryDirectory() as d:
        files = []
        for i, c in enumerate(['Paris is the capital of France. ', 'Berlin is the capital of Germany. ']):
            files.append(os.path.join(d, f'c{i}.txt'))
            with open(files[-1], 'w') as f:
                f.write(c)
        r = subprocess.run([KVFSCTL, 'eval', '-m', SMOLLM2, '--chat', '--query', query, '--greedy', '4', '--json']
                           + files, capture_output=True, text=True)
    import json
    got = json.loads(r.stdout[r.stdout.index('{'):])['prompt_ids'] if r.returncode == 0 else None
    want_head = llm.tokenize(head.encode(), add_bos=True, special=True)
    want_tail = llm.tokenize((query + tail).encode(), add_bos=False, special=True)
    ok = got is not None and got[:len(want_head)] == want_head and got[-len(want_tail):] == want_tail
    report(ok, f'eval --chat SmolLM2: the prompt opens with llama.cpp\'s chat head {want_head[:6]}... and ends with '
           f'the query and generation prompt {want_tail[-4:]}' + ('' if ok else f': kvfs {got} {r.stderr[-300:]}'))
    del llm

# 5. refusals
for what, args, needle in [
        ('unknown template', ['--chat-template', '{% for m in messages %}{{ m.content }}{% endfor %}'],
         'not recognised'),
        ('family not rendered', ['--chat-template', 'yandex'], "'yandex', which kvfs does not render"),
        ('GGUF without a template', [], 'no tokenizer.chat_template')]:
    path = GEMMA3 if not args else vocab_path('llama-spm')
    if not os.path.exists(path):
        continue
    got, err = kvfs(path, [('user', USER)], extra=args)
    report(got is None and needle in err, f'refusal, {what}: {err}')
r = subprocess.run([KVFSCTL, 'tokenize', '-m', SMOLLM2, '--system', 'x', '-'], input=b'x', capture_output=True)
report(r.returncode == 2 and b'needs --chat' in r.stderr, f'refusal, --system without --chat: {r.stderr.decode()!r}')

print('PASS' if not failed else f'{failed} failures')
sys.exit(1 if failed else 0)
