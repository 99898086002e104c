#!/usr/bin/env bash
# The demo: set up, build ptc-run, then run a shipped example graph through
# the reference interpreter: first its canonical text (--emit=ptir), then its
# outputs on deterministic random inputs. Last, ptexplain runs the shipped
# model with graph breaks (examples/explain/model_with_breaks.py) with ptc and
# explains them (skipped, with the reason, where ptexplain cannot be built).
#   bash scripts/demo.sh [EXAMPLE.ptir]     (default: examples/mlp.ptir)
set -euo pipefail
cd "$(dirname "$0")/.."
example=${1:-examples/mlp.ptir}

bash scripts/setup.sh
PY=$(cat build/ptc-python)
if ! { cmake -S . -B build -DPTC_PYTHON="$PY" &&
        cmake --build build -j"${PTC_JOBS:-2}" --target ptc-run; } >build/demo-build.log 2>&1; then
    tail -n 40 build/demo-build.log
    echo "demo: building ptc-run failed (full log: build/demo-build.log)"
    exit 1
fi

run() {
    printf '\n$ %s\n' "$*"
    "$@"
}
run build/tools/run/ptc-run --emit=ptir "$example"
run build/tools/run/ptc-run --seed 1 "$example"

# ptexplain embeds the configured python3; CMake says when it cannot (no
# libpython for that interpreter).
if grep -q "ptexplain is not built" build/demo-build.log; then
    echo
    grep "ptexplain is not built" build/demo-build.log | sed 's/^-- /demo: skipping the ptexplain step: /'
    exit 0
fi
if ! cmake --build build -j"${PTC_JOBS:-2}" --target ptexplain >>build/demo-build.log 2>&1; then
    tail -n 40 build/demo-build.log
    echo "demo: building ptexplain failed (full log: build/demo-build.log)"
    exit 1
fi
run build/tools/explain/ptexplain examples/explain/model_with_breaks.py
