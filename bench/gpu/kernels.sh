#!/bin/sh
# Times ptc's fused kernels (the kernel table of bench/gpu/run.py: pointwise,
# gelu(x+b), softmax, layer_norm, in fp32 and bf16) under each candidate
# setting of the CUDA code generator, in one GPU session, and prints one
# table: per kernel and setting, % of copy bandwidth over 20 back-to-back
# calls and, in brackets, of the kernels' own GPU time (torch.profiler).
#
#   sh bench/gpu/kernels.sh [OUT_DIR]     (default: $OUT, else /tmp/ptc-out)
#
# Each setting runs `run.py --models "" --compilers ptc` in a process of its
# own, which compiles into a fresh kernel cache (and the settings are part of
# the cache key besides), so no kernel compiled under one setting is served
# to another. The first setting runs again at the end: the difference
# between its two runs is the noise. PTC_KERNEL_SETTINGS replaces the list:
# space-separated NAME=ENV entries, ENV a comma-separated list of VAR=VALUE
# ("-" for none). Results: OUT_DIR/kernels-NAME/bench.json, and the table in
# OUT_DIR/kernels.md.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${OUT:-/tmp/ptc-out}}
export PTC_BUILD_DIR=${PTC_BUILD_DIR:-$src/build} PTC_SOURCE_DIR=${PTC_SOURCE_DIR:-$src}
export PYTHONPATH=$src/build/python:$src/tests/python${PYTHONPATH:+:$PYTHONPATH}
settings=${PTC_KERNEL_SETTINGS:-"default=- ahead=PTC_CUDA_ROW_AHEAD=1 \
ahead2=PTC_CUDA_ROW_AHEAD=1,PTC_CUDA_ROW_AHEAD_ROWS=2 ahead8=PTC_CUDA_ROW_AHEAD=1,PTC_CUDA_ROW_AHEAD_ROWS=8 \
ahead-all=PTC_CUDA_ROW_AHEAD=2 forward=PTC_CUDA_ROW_FORWARD=1 \
ahead-forward=PTC_CUDA_ROW_AHEAD=1,PTC_CUDA_ROW_FORWARD=1"}
first=${settings%% *}
mkdir -p "$out"
names=""
for s in $settings "again-$first"; do
  name=${s%%=*}
  vars=${s#*=}
  case $name in again-*) vars=${first#*=} ;; esac
  [ "$vars" = "-" ] && vars=""
  t0=$(date +%s)
  # shellcheck disable=SC2046 # the settings are VAR=VALUE words
  env $(echo "$vars" | tr ',' ' ') python3 "$src/bench/gpu/run.py" --models "" --compilers ptc \
    --out "$out/kernels-$name" >"$out/kernels-$name.log" 2>&1 || echo "$name: run.py failed, see $out/kernels-$name.log"
  echo "$name ($vars): $(($(date +%s) - t0)) s"
  names="$names $name"
done
python3 - "$out" $names <<'PY' | tee "$out/kernels.md"
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
runs, device = {}, "?"
for n in names:
    try:
        with open(os.path.join(out, "kernels-" + n, "bench.json")) as f:
            d = json.load(f)
        runs[n], device = d.get("kernels") or {}, d.get("device", device)
    except (OSError, ValueError):
        runs[n] = {}
print("ptc's kernels on %s: %% of copy bandwidth over 20 calls [of the kernels' own time]" % device)
print("copy GB/s: " + ", ".join("%s %.0f" % (n, r["copy_gbps"]) for n, r in runs.items() if r))
print()
print("| kernel | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
order = [k["name"] for r in runs.values() if r for k in r["kernels"]]
for kn in dict.fromkeys(order):
    cells = []
    for n in names:
        row = next((k for k in runs[n].get("kernels", []) if k["name"] == kn), {})
        p, q = row.get("ptc_pct_copy"), row.get("ptc_kernel_pct_copy")
        cells.append("%s [%s]" % ("%.1f" % p if p else row.get("ptc_error", "-")[:40],
                                  "%.1f" % q if q else "-"))
    print("| %s | %s |" % (kn, " | ".join(cells)))
PY
