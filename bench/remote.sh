#!/bin/bash
# Remote tier benchmark (Ceph RADOS): read throughput through kvfs vs plain
# librados, blend TTFT from RADOS / disk / RAM vs full prefill.  Uses the
# system python, which has Debian's rados module.
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/remote.py
