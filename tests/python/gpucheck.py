"""Whether ptc's CUDA backend can run here, asked of ptc itself.

A tiny graph is run with `ptc-run --backend cuda`: where there is no NVIDIA
driver or no GPU, ptc reports the CUDA path unavailable (and the CPU backend
keeps working); GPU tests then skip with that reason, so CI stays green.
"""
import os
import tempfile

import pytest

from ptcio import ptc_run

_state = {}

GRAPH = "# ptc ir v1\ngraph probe(%x: f32[4] cpu) {\n  %0 = add(%x, %x) : f32[4]\n  return (%0)\n}\n"


def cuda_reason():
    """None when the CUDA backend runs here, else why not (one line)."""
    if "reason" not in _state:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "probe.ptir")
            with open(path, "w") as f:
                f.write(GRAPH)
            r = ptc_run("--backend", "cuda", "--no-cache", path)
        if r.returncode == 0:
            _state["reason"] = None
        elif "unavailable" in r.stderr or "not part of this build" in r.stderr:
            _state["reason"] = "no GPU for ptc's CUDA backend: " + r.stderr.strip().splitlines()[-1]
        else:
            raise AssertionError("ptc-run --backend cuda failed on a probe graph:\n" + r.stderr)
    return _state["reason"]


def require_gpu():
    reason = cuda_reason()
    if reason:
        pytest.skip(reason)
