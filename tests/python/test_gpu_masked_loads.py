"""Masked contiguous loads in CUDA kernels stay vector loads (cuda/body.c,
masked_contig_load): the copies that pad a matmul operand's rows, pad_rows
(its mask differs between the lanes of a row's last vector) and
pad_zero_rows (its mask is the same in every lane), load whole vectors
unmasked where every lane is inside and write zeros past the source. Their
results, read through both gradient matmuls of an LM head, equal torch's on
odd row lengths in bf16 and f32, with the arena filled with NaN bytes (the
padding must be written, not left). Runs on a GPU (seconds on an H200)."""
import os
import re

import pytest
import torch

import ptc
from gpucheck import require_gpu


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


def grads(g, w, h):
    return g @ w, g.t() @ h


def kernel_names(trace):
    texts = [open(os.path.join(d, n)).read() for d, _, fs in os.walk(trace) for n in fs
             if n == "kernels.txt"]
    return re.findall(r"^kernel \d+ \S+?_((?:un)?pad(?:_zero)?_rows):", "".join(texts), re.M)


# (dtype, M, K, N): K odd, so g's rows are copied into rows of K rounded up
# and W gets zero rows past K (the plans: ptc-run --emit=kernels --backend cuda)
CASES = [(torch.bfloat16, 512, 2049, 256), (torch.float32, 1024, 50257, 768),
         (torch.bfloat16, 2048, 50257, 768)]


@pytest.mark.parametrize("dtype,m,k,n", CASES, ids=["bf16-2049", "f32-50257", "bf16-50257"])
def test_padded_copies_of_odd_rows_equal_torch(dtype, m, k, n, tmp_path, monkeypatch):
    monkeypatch.setenv("PTC_ARENA_SEGMENTS", "1")
    torch.manual_seed(0)
    g = torch.randn(m, k, device="cuda").to(dtype)
    w = torch.randn(k, n, device="cuda").to(dtype)
    h = torch.randn(m, n, device="cuda").to(dtype)
    torch.use_deterministic_algorithms(True)  # the arena's memory comes as NaN bytes
    ptc.config.trace_dir = str(tmp_path)
    try:
        got = ptc.compile(grads)(g, w, h)
    finally:
        ptc.config.trace_dir = None
        torch.use_deterministic_algorithms(False)
    assert sorted(kernel_names(tmp_path)) == ["pad_rows", "pad_zero_rows"]
    for a, want in zip(got, grads(g.double(), w.double(), h.double())):
        assert torch.isfinite(a).all()
        scale = want.abs().max().item()
        torch.testing.assert_close(a.double(), want, rtol=2e-2, atol=2e-2 * scale)
