"""Where the oracle tests and benchmarks find the repository, kvfsctl ($BUILD,
default build/) and the models."""
import os

ROOT = os.environ.get('KVFS_ROOT', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
BUILD = os.environ.get('BUILD', 'build')
KVFSCTL = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), 'kvfsctl')
SMOLLM2 = os.path.join(ROOT, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf')
GEMMA3 = os.path.join(ROOT, 'models', 'gemma-3-270m-q4_k_m.gguf')  # tools/fetch-gemma3.sh
# the oracle tests' model: SmolLM2 unless KVFS_ORACLE_MODEL names another
# (the *_gemma3.sh tests run the same oracles on Gemma 3)
MODEL = os.environ.get('KVFS_ORACLE_MODEL') or SMOLLM2
