#!/usr/bin/env bash
# Everything CI checks, in order (the README's test command; .ci/run runs it):
#   1. scripts/setup.sh (Debian packages, Python packages, the interpreter);
#   2. build/ with -DPTC_WERROR=ON, then ctest over every label (gpu tests
#      skip themselves without a GPU);
#   3. build-asan/ with -DPTC_SANITIZE=address,undefined, ctest -L unit,
#      the 30 s thread stress test (python.test_capture_threads) and the
#      trace tables' growth (python.test_capture_tables_grow);
#   4. the .ptir parser fuzzer (clang, libFuzzer) for $PTC_FUZZ_SECONDS
#      (default 60) seconds, seeded with tests/golden, tests/malformed and
#      examples, then the JSON reader's and the kernel cache loader's for a
#      third of that each: any crash, leak, broken round trip or cache file
#      loaded against its digest fails the run.
# Stops at the first failure. $PTC_JOBS sets the parallelism (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${PTC_JOBS:-2}
FUZZ_SECONDS=${PTC_FUZZ_SECONDS:-60}
T0=$SECONDS
step() { printf '\n==> [%dm%02ds] %s\n' $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60)) "$*"; }

step "setup"
bash scripts/setup.sh
PY=$(cat build/ptc-python)

step "build: build/ (-DPTC_WERROR=ON)"
cmake -S . -B build -DPTC_WERROR=ON -DPTC_PYTHON="$PY" >/dev/null
cmake --build build -j"$JOBS"

step "ctest: all labels"
ctest --test-dir build --output-on-failure -j"$JOBS"

step "sanitizers: build-asan/ (-DPTC_SANITIZE=address,undefined), unit label"
cmake -S . -B build-asan -DPTC_WERROR=ON -DPTC_SANITIZE=address,undefined \
    -DPTC_PYTHON="$PY" >/dev/null
cmake --build build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -L unit --output-on-failure -j"$JOBS"
ctest --test-dir build-asan -R 'python.test_capture_(threads|tables_grow)$' --output-on-failure

step "fuzz: the .ptir parser for ${FUZZ_SECONDS}s, the JSON reader and the kernel cache's loader for $((FUZZ_SECONDS / 3))s each (build-fuzz/, clang-16)"
CC=clang-16 cmake -S . -B build-fuzz -DPTC_FUZZ=ON -DPTC_PYTHON="$PY" >/dev/null
cmake --build build-fuzz -j"$JOBS" --target fuzz_parse fuzz_json fuzz_cache
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ptir" "$work/json" "$work/cache" build-fuzz/crashes
for f in tests/golden/*.ptir tests/malformed/*.ptir examples/*.ptir tests/fuzz/ptir_corpus/*.ptir; do
    cp "$f" "$work/ptir/$(basename "$(dirname "$f")")_$(basename "$f")"
done
cp tests/fuzz/json_corpus/*.json "$work/json/"
cp tests/fuzz/cache_corpus/* "$work/cache/"
fuzz() { # fuzz TARGET SECONDS CORPUS
    if ! "build-fuzz/tests/fuzz/$1" -max_total_time="$2" -max_len=4096 -timeout=10 \
            -rss_limit_mb=2048 -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1 \
            "$3" >"build-fuzz/$1.log" 2>&1; then
        tail -n 60 "build-fuzz/$1.log"
        echo "fuzz: $1 failed on an input; it is saved under build-fuzz/crashes/"
        exit 1
    fi
    echo "$1: $(grep -E '^Done' "build-fuzz/$1.log")"
}
fuzz fuzz_parse "$FUZZ_SECONDS" "$work/ptir"
fuzz fuzz_json $((FUZZ_SECONDS / 3)) "$work/json"
fuzz fuzz_cache $((FUZZ_SECONDS / 3)) "$work/cache"

step "all tests passed"
