#!/bin/bash
# Blend TTFT through the mount with the layer-wise loader (disk, RAM, slow
# tier, ratio=auto) vs full prefill; prints a markdown section.
set -eu
cd "$(dirname "$0")/.."
exec python3 bench/pipeline.py
