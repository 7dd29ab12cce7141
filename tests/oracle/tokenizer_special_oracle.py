"""Control tokens and BOS against llama.cpp: --special / --bos must give the
same ids as tokenize(special=True, add_bos=True) on chat-formatted text."""
import os, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(__file__))
import llama_cpp

from paths import ROOT, KVFSCTL, MODEL
vocab = llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)

texts = [
    '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n',
    '<|endoftext|>two<|endoftext|><|endoftext|> adjacent, and <|im_end|>trailing',
    'partial <|im_start and im_start|> and <|unknown|> are plain text',
    ' <|im_start|> spaces around <|im_end|>  \n',
    '',
]
if 'gemma' in os.path.basename(MODEL):  # Gemma's turns and its <bos>, <eos>, <pad>
    texts = [
        '<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n',
        '<bos>two<eos><eos> adjacent, and <end_of_turn>trailing <pad>',
        'partial <start_of_turn and end_of_turn> and <unknown_tag> are plain text',
        ' <start_of_turn> spaces around <end_of_turn>  \n',
        '',
    ]
fail = 0
with tempfile.TemporaryDirectory() as td:
    f = os.path.join(td, 't.txt')
    for text in texts:
        data = text.encode()
        open(f, 'wb').write(data)
        for flags, special, bos in (([], False, False), (['--special'], True, False),
                                    (['--bos'], False, True), (['--special', '--bos'], True, True)):
            out = subprocess.run([KVFSCTL, 'tokenize', '-m', MODEL, *flags, f], capture_output=True, text=True)
            got = [int(x) for x in out.stdout.split()] if out.returncode == 0 else None
            ref = vocab.tokenize(data, add_bos=bos, special=special)
            if got != ref:
                fail += 1
                print(f'FAIL {flags} {text[:80]!r}\n  ours {got}\n  ref  {ref}')
print(f'{len(texts)} texts x 4 flag sets, {fail} mismatching')
sys.exit(1 if fail else 0)
