#!/usr/bin/env bash
# Checks that two builds of ptc emit the same code for every .ptir graph in the
# repository: the CPU backend's LLVM IR (--emit=llvm) and the CUDA backend's
# PTX for sm_90 (--emit=ptx, no GPU needed), and for graphs in files that use
# f16/bf16 also sm_80 and sm_70, whose conversions take other paths. Kernel
# names carry a hash and may differ; everything else, errors included, must be
# byte for byte the same. Refactors that should not change the generated
# code (compiler/codegen, lower, passes, the op tables) run it before each
# commit; README's "Building and testing" says how.
#
#   scripts/check_codegen_identical.sh [--quick | --medium] [--only REGEX] [--jobs N] REF_BUILD NEW_BUILD
#
# REF_BUILD and NEW_BUILD are build folders (holding tools/run/ptc-run).
# --quick emits only the first graph of each file; --medium every graph for
# llvm and sm_90, the first only for sm_80 and sm_70; neither: every graph for
# every target. --only keeps the files whose path matches REGEX (grep -E).
# Given the same build twice, it only fills ref/ (to prime it while the new
# build compiles). Dumps go to $PTC_CHECK_DIR (default
# /tmp/ptc-codegen-check-$USER), which one run holds at a time: ref/ is reused
# across runs while REF_BUILD's ptc-run is unchanged, new/ is made afresh.
# Exit status: 0 identical, 1 some output differs (the first diffs are shown),
# 2 bad usage, a busy dump folder or a dump that could not be written.
set -euo pipefail

quick=0
jobs=4
only=.
while [ $# -gt 2 ]; do
    case "$1" in
    --quick) quick=1; shift ;;
    --medium) quick=2; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) break ;;
    esac
done
if [ $# -ne 2 ]; then
    sed -n '11,22p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
ref_run="$1/tools/run/ptc-run"
new_run="$2/tools/run/ptc-run"
for r in "$ref_run" "$new_run"; do
    [ -x "$r" ] || { echo "check_codegen_identical: no $r" >&2; exit 2; }
done

src="$(cd "$(dirname "$0")/.." && pwd)"
dir="${PTC_CHECK_DIR:-/tmp/ptc-codegen-check-${USER:-$(id -u)}}"
mkdir -p "$dir"
# Two runs on one folder would overwrite each other's dumps.
exec 9>"$dir/lock"
flock -n 9 || { echo "check_codegen_identical: $dir is in use by another run (set PTC_CHECK_DIR)" >&2; exit 2; }
export PTC_CACHE_DIR="$dir/cache"

# One job per line: FILE GRAPH EMIT (EMIT: llvm, or ptx:sm_NN).
list="$dir/jobs.txt"
(
    cd "$src"
    find examples tests -name '*.ptir' | grep -E -- "$only" | LC_ALL=C sort | while read -r f; do
        archs="sm_90"
        grep -q 'f16' "$f" && archs="sm_90 sm_80 sm_70"
        graphs=$(sed -n 's/^graph \([A-Za-z0-9_]*\)(.*/\1/p' "$f")
        [ -n "$graphs" ] || graphs="-"
        [ $quick -eq 1 ] && graphs=$(echo "$graphs" | head -1)
        first=1
        for g in $graphs; do
            echo "$f $g llvm"
            for a in $archs; do
                [ $quick -eq 2 ] && [ $first -eq 0 ] && [ $a != sm_90 ] && continue
                echo "$f $g ptx:$a"
            done
            first=0
        done
    done
) >"$list"

# dump RUN OUT FILE GRAPH EMIT: the normalised output of one job in OUT.
dump() {
    local run="$1" out="$2" f="$3" g="$4" emit="$5"
    local name="$out/$(echo "$f.$g.$emit" | tr '/:' '__')"
    [ -s "$name" ] && return 0
    local args=(--no-cache --seed 1)
    [ "$g" != "-" ] && args+=(--graph "$g")
    case "$emit" in
    llvm) args+=(--emit=llvm) ;;
    ptx:*) args+=(--emit=ptx --cuda-arch "${emit#ptx:}") ;;
    esac
    { "$run" "${args[@]}" "$src/$f" 2>&1; echo "exit $?"; } |
        sed -E 's/(ptc_[A-Za-z0-9_]*[_k])[0-9a-f]{16,}/\1HASH/g' >"$name.tmp.$$"
    mv "$name.tmp.$$" "$name"
}
export -f dump
export src

dumps_failed() {
    echo "check_codegen_identical: some dumps could not be written (see above)" >&2
    exit 2
}

stamp="$(stat -c '%s %Y' "$ref_run")"
if [ "$(cat "$dir/ref.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir/ref"
fi
mkdir -p "$dir/ref"
echo "$stamp" >"$dir/ref.stamp"
rm -rf "$dir/new"
mkdir -p "$dir/new"

n=$(wc -l <"$list")
echo "check_codegen_identical: $n emits per build ($(cut -d' ' -f1 "$list" | sort -u | wc -l) files)"
if [ "$ref_run" -ef "$new_run" ]; then
    xargs -P "$jobs" -L 1 bash -c 'dump "$0" "$1" "$2" "$3" "$4"' "$ref_run" "$dir/ref" <"$list" ||
        dumps_failed
    echo "check_codegen_identical: one build given: ref/ primed"
    exit 0
fi
# both sides of a job together: a difference shows in new/ as soon as it is made
xargs -P "$jobs" -L 1 bash -c 'dump "$0" "$2" "$4" "$5" "$6" && dump "$1" "$3" "$4" "$5" "$6"' \
    "$ref_run" "$new_run" "$dir/ref" "$dir/new" <"$list" || dumps_failed

# Compare only this run's jobs (ref/ may hold more from a full run).
: >"$dir/diff.txt"
while read -r f g emit; do
    name="$(echo "$f.$g.$emit" | tr '/:' '__')"
    cmp -s "$dir/ref/$name" "$dir/new/$name" || echo "$name" >>"$dir/diff.txt"
done <"$list"
if [ ! -s "$dir/diff.txt" ]; then
    echo "check_codegen_identical: all $n outputs identical (kernel-name hashes aside)"
    exit 0
fi
echo "check_codegen_identical: $(wc -l <"$dir/diff.txt") of $n outputs differ ($dir/diff.txt):"
head -5 "$dir/diff.txt" | while read -r name; do
    diff "$dir/ref/$name" "$dir/new/$name" | head -20
done
exit 1
