#!/bin/sh
# Runs on the GPU machine (see scripts/gpu/build.sh): unpacks ptc-gpu.tar.xz
# beside this script into /tmp/ptc and runs
#   tests  the gpu-labelled tests (pytest, ptc's CUDA backend against the
#          reference and torch), log in $OUT/tests.log
#   bench  the GPU benchmark (bench/gpu/run.py), results in $OUT
#   all    both
#   cmd    runs the rest of the command line in the unpacked tree (a shell
#          command), with the same environment
# Extra arguments go to pytest (tests) or the benchmark (bench).
set -u
here=$(cd "$(dirname "$0")" && pwd)
what=${1:-all}
[ $# -gt 0 ] && shift
out=${OUT:-/tmp/ptc-out}
mkdir -p "$out" /tmp/ptc
tar xJf "$here/ptc-gpu.tar.xz" -C /tmp/ptc
cd /tmp/ptc
export PTC_BUILD_DIR=/tmp/ptc/build PTC_SOURCE_DIR=/tmp/ptc PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/ptc/build/python:/tmp/ptc/tests/python${PYTHONPATH:+:$PYTHONPATH}
export PTC_CACHE_DIR=${PTC_CACHE_DIR:-/tmp/ptc-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
ldd build/tools/run/ptc-run | grep -v "=> /" | tee -a "$out/gpu.txt" >/dev/null
rc=0
if [ "$what" = cmd ]; then
  sh -c "$*" 2>&1 | tee "$out/cmd.log"
  exit $?
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_gpu_*.py "$@" 2>&1 | tee "$out/tests.log"
  rc=$?
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 bench/gpu/run.py --out "$out" "$@" 2>&1 | tee "$out/bench.log"
  [ $rc -eq 0 ] && rc=$?
fi
exit $rc
