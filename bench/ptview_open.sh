#!/usr/bin/env bash
# Benchmark (not a test): how fast ptview opens a large trace and how much
# memory it takes.
#
#   bench/ptview_open.sh [BLOCKS] [PTVIEW]
#
# Generates a trace with tests/data/traces/gen_traces.py (5 captured nodes per
# block: the default 2000 blocks make a 10,000-node captured graph, ~58,000
# prims nodes, 16,000 loop buffers, 8,000 kernels and 8,000 kernel_<n>.ll
# files) and measures:
#   - the browser in tmux: time from start to the first full screen (ptview
#     prints it: "opened in N ms"), peak RSS then, the time until the other
#     stages have loaded in the background, and peak RSS after that;
#   - a few keystrokes on the big graph (search, fold all, unfold all, stage
#     switch), timed from send-keys until the screen shows the result;
#   - ptview --check, which reads every stage: wall time and peak RSS.
set -eu
BLOCKS=${1:-2000}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PTVIEW=${2:-$SRC/build/tools/viewer/ptview}
[ -x "$PTVIEW" ] || { echo "ptview not built: $PTVIEW" >&2; exit 2; }
command -v tmux >/dev/null || { echo "needs tmux" >&2; exit 2; }
TMP=$(mktemp -d /tmp/ptview-bench.XXXXXX)
SOCK=ptview-bench-$$
T=(tmux -f /dev/null -L "$SOCK")
trap '"${T[@]}" kill-server >/dev/null 2>&1; rm -rf "$TMP"' EXIT

python3 "$SRC/tests/data/traces/gen_traces.py" big "$TMP/trace" --blocks "$BLOCKS"
echo "trace size: $(du -sh "$TMP/trace" | cut -f1), $(ls "$TMP/trace/forward_0" | wc -l) files"

now() { date +%s%N; }
ms_since() { echo $(( ($(now) - $1) / 1000000 )); }
hwm() { awk '/VmHWM/ {print int($2 / 1024) " MB"}' "/proc/$1/status"; }
wait_for() { # TEXT [TIMEOUT_S]
    local end=$(( $(date +%s) + ${2:-60} ))
    until "${T[@]}" capture-pane -p -t b | grep -qF -- "$1"; do
        [ "$(date +%s)" -lt "$end" ] || { echo "timed out waiting for '$1'" >&2; exit 1; }
        sleep 0.01
    done
}
timed_keys() { # LABEL EXPECT KEYS...
    local label=$1 expect=$2
    shift 2
    local t0
    t0=$(now)
    "${T[@]}" send-keys -t b "$@"
    wait_for "$expect"
    printf '  %-34s %5s ms\n' "$label" "$(ms_since "$t0")"
}

echo "browser (tmux, 160x50):"
"${T[@]}" new-session -d -s b -x 160 -y 50 "exec env TERM=screen $PTVIEW $TMP/trace"
PID=$("${T[@]}" display-message -p -t b '#{pane_pid}')
wait_for "opened in"
echo "  first screen:                      $("${T[@]}" capture-pane -p -t b | grep -o 'opened in [0-9]* ms'), peak RSS $(hwm "$PID")"
t0=$(now)
until [ "$("${T[@]}" capture-pane -p -t b | grep -cE '^ +(prims|loops|kernels|llvm) +[0-9]')" = 4 ]; do sleep 0.02; done
echo "  other stages loaded (background):  +$(ms_since "$t0") ms, peak RSS $(hwm "$PID")"
timed_keys "search /layer_norm (first match)" "search 'layer_norm': match 1 of" / l a y e r _ n o r m Enter
timed_keys "next match (n)" "match 2 of" n
timed_keys "fold all modules (C)" "all groups folded" C
timed_keys "unfold all (E)" "all groups unfolded" E
timed_keys "switch stage to prims (s)" "stage prims of forward_0" s
timed_keys "provenance of a prims node (g)" "provenance:" g
echo "  peak RSS at the end:               $(hwm "$PID")"
"${T[@]}" send-keys -t b q

echo "ptview --check (reads every stage):"
/usr/bin/time -f "  wall %e s, peak RSS %M KB" "$PTVIEW" --check "$TMP/trace" | sed 's/^/  /'
