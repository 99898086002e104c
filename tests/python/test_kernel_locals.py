"""Kernel-local buffers are sized for one outer iteration.

A local's per-iteration part is the dims after the outer loops it was found
local under. When the schedule collapses contiguous outer loops into one, the
dims before that point all belong to the outer loops: a softmax over
[4, 8, 32] owns 32 floats per row, not 8 * 32. Sized from the collapsed loop
count instead, a [16, 12, 128, 128] attention softmax's backward asked for
786 KB per team, which on CUDA went to a global scratch area the launch
overran (CUDA_ERROR_ILLEGAL_ADDRESS in BERT's compiled backward)."""
import re

from ptcio import ptc_run

SOFTMAX = """# ptc ir v1
graph forward(%x: f32[4,8,32] cpu, %w: f32[32] cpu, %b: f32[32] cpu) {
  %0 = layer_norm(%x, [32], %w, %b, 1e-05) : f32[4,8,32]
  %1 = softmax(%x, -1) : f32[4,8,32]
  %2 = mul(%0, %1) : f32[4,8,32]
  return (%2)
}
"""


def emit(tmp_path, what, backend):
    path = tmp_path / "softmax.ptir"
    path.write_text(SOFTMAX)
    r = ptc_run("--emit=" + what, "--backend", backend, path)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_locals_print_their_outer_dims(tmp_path):
    out = emit(tmp_path, "kernels", "cpu")
    assert "outer [o0 < 32]" in out, out
    rows = re.findall(r"local \w+: f32\[([^\]]*)\]", out)
    assert rows and "_,_,32" in rows, rows
    assert all(dims.split(",")[:2] == ["_", "_"] for dims in rows), rows


def test_cpu_locals_are_one_row(tmp_path):
    sizes = [int(n) for n in re.findall(r"alloca \[(\d+) x float\]", emit(tmp_path, "llvm", "cpu"))]
    assert sizes and max(sizes) == 32, sizes


def test_cuda_locals_are_one_row(tmp_path):
    depots = [int(n) for n in re.findall(r"__local_depot\d+\[(\d+)\]", emit(tmp_path, "ptx", "cuda"))]
    assert depots and max(depots) <= 32 * 4, depots


def test_results_match_the_reference(tmp_path):
    path = tmp_path / "softmax.ptir"
    path.write_text(SOFTMAX)
    r = ptc_run("--backend", "cpu", "--check", path)
    assert r.returncode == 0, r.stdout + r.stderr
