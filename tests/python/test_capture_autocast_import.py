"""torch without the autocast functions ptc reads: an error, never a crash.

ptc reads and sets torch's autocast state through torch.is_autocast_enabled
and its siblings, imported on first use. When one cannot be imported (a torch
build without it, or a module shadowing it), the compile fails with an
internal error: the call runs eagerly after one warning, or raises under
PTC_STRICT=1. Before, the missing function was a NULL pointer and the first
autocast read crashed the process. Runs in a subprocess: the functions are
imported once per process.
"""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

PROGRAM = """
import warnings, torch
del torch.is_autocast_enabled  # both of torch's autocast APIs use it
import ptc
ptc.config.repro_dir = {repro!r}

def f(x):
    return torch.relu(x) * 2 + 1

c = ptc.compile(f, backend="eager")
x = torch.randn(3, 4)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        same = all(torch.equal(c(x), f(x)) for _ in range(3))
        print("same", same)
    except Exception as e:
        print("raised", type(e).__name__, e)
for w in caught:
    print("warning", w.message)
"""


def run(tmp_path, **env):
    code = PROGRAM.format(repro=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env))
    assert r.returncode == 0, "exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr)
    return r.stdout.splitlines()


def test_missing_autocast_function_falls_back_with_one_warning(tmp_path):
    out = run(tmp_path, PTC_STRICT="0")
    assert out[0] == "same True", out
    warns = [l for l in out if l.startswith("warning ptc:")]
    assert len(warns) == 1, out
    assert "torch.is_autocast_enabled is missing" in warns[0] and "running it eagerly" in warns[0], warns


def test_missing_autocast_function_raises_under_strict(tmp_path):
    out = run(tmp_path, PTC_STRICT="1")
    assert out[0].startswith("raised InternalError") and "torch.is_autocast_enabled" in out[0], out
