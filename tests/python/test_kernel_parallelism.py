"""A kernel keeps the parallelism of the big work in it.

A kernel's outer loops are what runs in parallel (OpenMP teams on the CPU,
blocks on CUDA); a node joining a kernel runs its loops past the shared outer
ones inside each outer iteration. A scalar reduction has no outer loop, so
everything that joined it ran on one core or in one CUDA block: GPT-2's loss
graph put a [2048, 50257] reduction and copy behind its scalar sum, one kernel
that took 21.7 ms of a 42 ms training step on an H100 (57% of the GPU time).
A big node now refuses such a kernel and gets outer loops of its own."""
import re

import pytest

from ptcio import ptc_run

LOSS_SHAPE = """# ptc ir v1
graph forward(%x: f32[256,1000] cpu) {
  %0 = sum(%x) : f32[]
  %1 = amax(%x, [1]) : f32[256]
  %2 = mul(%x, 2.0) : f32[256,1000]
  return (%0, %1, %2)
}
"""


def kernels(tmp_path, backend):
    path = tmp_path / "loss.ptir"
    path.write_text(LOSS_SHAPE)
    r = ptc_run("--emit=kernels", "--backend", backend, path)
    assert r.returncode == 0, r.stderr
    return re.split(r"\n(?=kernel \d+)", r.stdout)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_big_work_does_not_join_a_kernel_without_outer_loops(tmp_path, backend):
    for k in kernels(tmp_path, backend):
        if "outer [] " in k:
            assert not re.search(r"group \d+ \w+ \[i0 <", k), k


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_row_reduction_and_the_pointwise_pass_run_in_parallel(tmp_path, backend):
    ks = kernels(tmp_path, backend)
    rows = [k for k in ks if "amax" in k]
    assert rows and all("outer [o0 < 256" in k for k in rows), ks
    muls = [k for k in ks if "mul" in k.splitlines()[0]]
    assert muls and all(re.search(r"outer \[o0 < 256", k) for k in muls), ks


def test_results_match_the_reference(tmp_path):
    path = tmp_path / "loss.ptir"
    path.write_text(LOSS_SHAPE)
    r = ptc_run("--backend", "cpu", "--check", path)
    assert r.returncode == 0, r.stdout + r.stderr
