#!/usr/bin/env bash
# The demo: set up, build ptc-run, then run a shipped example graph through
# the reference interpreter: first its canonical text (--emit=ptir), then its
# outputs on deterministic random inputs.
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
