#!/usr/bin/env bash
# Prepares a Debian 12 machine to build and test ptc. Idempotent: a second run
# installs nothing and takes a second or two.
#
#  1. Debian packages (compilers, LLVM 16, Check, Graphviz, ncurses, headless
#     Chromium for the HTML report's test, ...):
#     apt-get runs only when one of them is missing.
#  2. Python packages from requirements.txt with pip, for the machine's python3
#     (or $PTC_PYTHON); a Debian system python gets a virtual environment in
#     .venv instead (PEP 668). pip uses short timeouts and no retries: where
#     PyPI cannot be reached (CI reaches only Debian's archive) this falls back
#     to Debian's python3-torch, python3-torchvision, python3-pytest and
#     python3-numpy for /usr/bin/python3, and says so.
#  3. Records the chosen interpreter in build/ptc-python; scripts/test.sh and
#     scripts/demo.sh pass it to CMake as -DPTC_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*"; }

DEBS=(build-essential cmake pkg-config git check
      llvm-16-dev libomp-16-dev clang-16 libclang-rt-16-dev libzstd-dev zlib1g-dev
      libncurses-dev libgraphviz-dev graphviz tmux groff-base
      chromium fonts-liberation
      python3 python3-dev python3-venv)

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        say "need root to run: $*"
        exit 1
    fi
}

missing_debs() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
            printf '%s ' "$p"
    done
}

apt_install() {
    local missing
    missing=$(missing_debs "$@")
    [ -z "$missing" ] && return 0
    say "installing Debian packages: $missing"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    # shellcheck disable=SC2086
    as_root apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# Does interpreter $1 have what the tests import?
py_has_basics() {
    "$1" -c 'import torch, torchvision, pytest, numpy' >/dev/null 2>&1
}

py_externally_managed() {
    "$1" - <<'PY' 2>/dev/null
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
         and sys.prefix == sys.base_prefix else 1)
PY
}

# Are requirements.txt's pins installed for interpreter $1? (Fast: no pip.)
py_meets_requirements() {
    "$1" - <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for line in open("requirements.txt"):
    line = line.split("#")[0].strip()
    if line:
        name, _, want = line.partition("==")
        if version(name) != want:
            sys.exit(1)
PY
}

# pip install -r requirements.txt into interpreter $1, failing fast offline.
# (pip's chatter goes to stderr: stdout carries choose_python's answer.)
pip_requirements() {
    py_meets_requirements "$1" && return 0
    "$1" -m pip --version >/dev/null 2>&1 || return 1
    "$1" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        --timeout 10 --retries 0 -r requirements.txt >&2
}

# Prints the interpreter to use, or nothing when only Debian's torch is left.
choose_python() {
    local py=${PTC_PYTHON:-$(command -v python3 || echo /usr/bin/python3)}
    if py_externally_managed "$py"; then
        # A Debian system python: pip installs into a virtual environment.
        if [ ! -x .venv/bin/python ]; then
            "$py" -m venv .venv >&2 2>/dev/null || rm -rf .venv
        fi
        [ -x .venv/bin/python ] || { echo ""; return; }
        py=$PWD/.venv/bin/python
    fi
    if pip_requirements "$py"; then
        echo "$py"
    elif py_has_basics "$py"; then
        say "pip could not install requirements.txt; using $py as it is" >&2
        echo "$py"
    else
        say "pip could not install requirements.txt for $py" >&2
        [ "$py" = "$PWD/.venv/bin/python" ] && rm -rf .venv
        echo ""
    fi
}

apt_install "${DEBS[@]}"

PY=$(choose_python)
if [ -z "$PY" ]; then
    say "PyPI is not reachable: FALLING BACK to Debian's python3-torch (1.13) for /usr/bin/python3."
    say "Without timm, transformers, torch.compile and F.scaled_dot_product_attention the tests"
    say "that need them skip themselves."
    apt_install python3-torch python3-torchvision python3-pytest python3-numpy
    PY=/usr/bin/python3
fi
# One import of everything the tests need, which also resolves pyenv shims to
# the real interpreter.
if ! info=$("$PY" -c 'import sys, torch, torchvision, pytest, numpy
print(sys.executable, torch.__version__)' 2>/dev/null); then
    say "$PY lacks torch/torchvision/pytest/numpy even after installing; giving up"
    exit 1
fi
PY=${info%% *}
mkdir -p build
echo "$PY" > build/ptc-python
say "python: $PY (torch ${info#* })"
