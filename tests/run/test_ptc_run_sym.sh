#!/usr/bin/env bash
# ptc-run's --sym parsing on every path that takes it: single values, lists
# taken in step, a name given twice, a name the graph lacks, and each refused
# form. Label unit, so the sanitizer leg runs it: there LeakSanitizer turns a
# byte lost while parsing into another exit status (issue 12: a strndup'd
# symbol name was never freed), which fails the case that leaked.
#
#   test_ptc_run_sym.sh PTC_RUN EXAMPLES_DIR
set -u
run=$1
graph=$2/symbolic_batch.ptir
failed=0

# expect STATUS PATTERN ARGS...: ptc-run ARGS exits with STATUS, its output
# (stdout and stderr) matches the extended regex PATTERN and reports no leak.
expect() {
    local want=$1 pattern=$2
    shift 2
    local out rc
    out=$("$run" "$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -Eq -- "$pattern" <<<"$out" || grep -q LeakSanitizer <<<"$out"; then
        echo "FAIL: ptc-run $* (exit $rc, want $want and /$pattern/)"
        echo "$out" | head -40
        failed=1
    fi
}

expect 0 'output 0 \(%3\): f32\[3,8\]' --sym s0=3 --sym=s1=7 "$graph"
expect 0 'output 1 \(%4\): f32\[21,1\]' --sym s0=3 --sym=s1=7 "$graph"
expect 0 'sizes: s0=33 s1=2' --sym s0=1,5,33 --sym s1=2 "$graph"
expect 0 'sizes: s0=5 s1=3' --sym s0=1,5 --sym s1=2,3 "$graph"
expect 0 'check: 2 outputs match' --check --no-cache --sym s0=2,6 "$graph"
expect 0 'output 0 \(%3\): f32\[9,8\]' --sym s0=1 --sym s0=9 "$graph"
expect 0 'output 0 \(%3\): f32\[4,8\]' --sym unused=3 "$graph"
expect 0 'output 0 \(%3\): f32\[2,8\]' --all --sym s0=2 "$graph"
expect 2 'lists of different lengths' --sym s0=1,2 --sym s1=1,2,3 "$graph"
expect 2 'excludes --inputs, --save-outputs and --emit' --sym s0=1,2 --emit=loops "$graph"
expect 2 '--sym expects NAME=VALUE' --sym s0 "$graph"
expect 2 '--sym expects NAME=VALUE' --sym s0=-1 "$graph"
expect 2 '--sym expects NAME=VALUE' --sym s0=3, "$graph"
expect 2 '--sym expects NAME=VALUE' --sym =3 "$graph"
expect 2 'more than 64 values' --sym "s0=$(seq -s, 1 65)" "$graph"
many=()
for k in $(seq 1 33); do many+=(--sym "n$k=1"); done
expect 2 'too many --sym bindings' "${many[@]}" "$graph"
exit $failed
