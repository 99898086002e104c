#!/bin/sh
# Builds ptc here for the GPU machine and packs what a device run needs.
#
# The GPU machine runs Ubuntu 24.04 with Python 3.12 and torch 2.11 but has no
# LLVM, so this build links LLVM's components statically (PTC_LLVM_STATIC,
# needs libzstd-dev) with --as-needed, so that the binaries depend only on
# libc, libstdc++, libgomp, libz, libzstd and libtinfo; the Python extension
# is stable-ABI, so the one built here loads in 3.12 there. Binaries are
# stripped and everything is packed into one xz tarball, well under the 64 MiB
# a device call may carry:
#
#   scripts/gpu/build.sh [OUT_DIR]       (default: .device/ in the source tree)
#   -> OUT_DIR/ptc-gpu.tar.xz, and OUT_DIR/run.sh (the command to run there)
#
# On the device: `sh .device/run.sh tests|bench|all` unpacks into /tmp/ptc,
# runs the gpu-labelled tests and/or the GPU benchmark, and writes logs and
# results to $OUT (see run.sh).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$src/.device}
build=${PTC_GPU_BUILD:-$src/build-gpu}
py=${PTC_PYTHON:-$(command -v python3)}
mkdir -p "$out" "$build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPTC_LLVM_STATIC=ON -DPTC_CUDA=ON \
  -DPTC_PYTHON="$py" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed \
  -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--as-needed >"$build/configure.log" || { cat "$build/configure.log"; exit 1; }
targets=ptc-run
if cmake --build "$build" --target help | grep -q ' ptc_python$'; then
  targets="$targets ptc_python"
fi
cmake --build "$build" -j"${PTC_JOBS:-2}" --target $targets
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tools/run" "$stage/tests"
cp "$build/tools/run/ptc-run" "$stage/build/tools/run/"
strip "$stage/build/tools/run/ptc-run"
if [ -d "$build/python" ]; then
  cp -r "$build/python" "$stage/build/python"
  find "$stage/build/python" -name '*.so' -exec strip {} \;
fi
cp -r "$src/tests/python" "$stage/tests/python"
cp -r "$src/tests/data" "$stage/tests/data"   # .ptir corpora the GPU tests run (tests/data/dynamic)
cp -r "$src/examples" "$stage/examples"
[ -d "$src/bench" ] && cp -r "$src/bench" "$stage/bench"
cp "$src/scripts/gpu/device.sh" "$stage/"
tar cJf "$out/ptc-gpu.tar.xz" -C "$stage" .
cp "$src/scripts/gpu/device.sh" "$out/run.sh"
ls -l "$out/ptc-gpu.tar.xz"
echo "ldd of ptc-run:"
ldd "$build/tools/run/ptc-run" | sed 's/^/  /'
