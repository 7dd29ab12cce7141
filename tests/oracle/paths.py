"""Where the oracle tests and benchmarks find the repository, kvfsctl ($BUILD,
default build/) and the SmolLM2 model."""
import os

ROOT = os.environ.get('KVFS_ROOT', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
BUILD = os.environ.get('BUILD', 'build')
KVFSCTL = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), 'kvfsctl')
MODEL = os.path.join(ROOT, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf')
