"""The blend benchmark's prompt set and llama.cpp's greedy decode, shared by
bench/blend_eval.py and bench/self_agreement.py so both measure the same
prompts: BLEND_PROMPTS prompts (default 30) of BLEND_CHUNKS passages (default
6) of BLEND_CHUNK_BYTES bytes (default 2000) plus a question; BLEND_DISTINCT=0
gives the earlier set, repeated passages included.  BLEND_SET=short: the
short-chunk set instead, 3 to 8 passages of about 30-120 tokens each
(package descriptions and license clauses, corpus.short_passages)."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests', 'oracle'))
from corpus import rag_passages, short_passages
import llama_oracle
from llama_oracle import greedy_llama  # noqa: F401 (shared with the bench scripts)

N = int(os.environ.get('BLEND_PROMPTS', '30'))
K = int(os.environ.get('BLEND_CHUNKS', '6'))
SIZE = int(os.environ.get('BLEND_CHUNK_BYTES', '2000'))
DISTINCT = os.environ.get('BLEND_DISTINCT', '1') != '0'
SHORT = os.environ.get('BLEND_SET', 'long') == 'short'
# llama.cpp's context holds every prompt of the set and its continuation
LLAMA_CTX = 8192
QUESTIONS = ['What does this text allow you to do?', 'Who is responsible for the software?',
             'Summarize the conditions in one sentence.', 'Which command or option is described?']


def prompt_files(td):
    """Yield (index, chunk files written under td, query) for each prompt."""
    prompts = short_passages(N) if SHORT else rag_passages(N, K, SIZE, distinct=DISTINCT)
    for p in range(N):
        files = []
        # a directory per prompt: a caller that lists the prompts first
        # (blend_ideas.py did) must not find the last prompt's passages
        # under every earlier prompt's names
        os.makedirs(os.path.join(td, f'p{p}'), exist_ok=True)
        for k, passage in enumerate(prompts[p]):
            f = os.path.join(td, f'p{p}', f'c{k}.txt')
            open(f, 'w').write(passage)
            files.append(f)
        yield p, files, '\n\nQuestion: ' + QUESTIONS[p % len(QUESTIONS)] + '\nAnswer:'


def open_llama():
    # last-token logits only: all of them would be 8.6 GB at Gemma 3's vocabulary
    return llama_oracle.open_llama(LLAMA_CTX, logits_all=False)
