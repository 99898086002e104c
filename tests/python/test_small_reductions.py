"""Reductions of a few elements per output (pooling windows) are unrolled
into pointwise kernels, vectorised along the output's inner dim (unroll.c);
max_pool2d's unread indices are not computed. Results equal eager's,
NaN and -inf included; indices that are returned are still computed."""
import os

import pytest
import torch
import torch.nn.functional as F

import ptc


def kernels_of(fn, args, tmp_path):
    ptc.config.trace_dir = str(tmp_path)
    try:
        got = ptc.compile(fn, fullgraph=True)(*args)
    finally:
        ptc.config.trace_dir = None
    texts = [open(os.path.join(d, n)).read() for d, _, files in os.walk(tmp_path) for n in files
             if n == "kernels.txt"]
    assert len(texts) == 1
    return got, texts[0]


def special_values(x):
    x = x.clone()
    x.view(-1)[::17] = float("nan")
    x.view(-1)[5::23] = float("-inf")
    x.view(-1)[7::29] = float("inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool_is_pointwise_and_equals_eager(dtype, tmp_path, dev="cpu"):
    def f(x):
        return F.max_pool2d(x, 3, stride=2, padding=1) * 2, F.max_pool2d(x.relu(), 2)

    x = special_values(torch.randn(2, 5, 11, 9)).to(dev, dtype)
    got, kernels = kernels_of(f, (x,), tmp_path)
    for g, e in zip(got, f(x)):
        torch.testing.assert_close(g, e, equal_nan=True)
    assert " reduction " not in kernels and "argmax" not in kernels, kernels


def test_avg_pool_and_small_sums(tmp_path):
    def f(x):
        return (F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, stride=1, padding=1),
                x.amin(dim=-1), x.sum(dim=(2, 3)))

    x = torch.randn(2, 3, 4, 4)
    got, kernels = kernels_of(f, (x,), tmp_path)
    for g, e in zip(got, f(x)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert " reduction " not in kernels, kernels


def test_returned_indices_are_computed(tmp_path):
    def f(x):
        return F.max_pool2d(x, 2, return_indices=True)

    x = torch.randn(2, 3, 8, 6)
    (v, i), kernels = kernels_of(f, (x,), tmp_path)
    ve, ie = f(x)
    torch.testing.assert_close(v, ve)
    assert torch.equal(i, ie)
    assert "argmax" in kernels


def test_large_windows_stay_reductions(tmp_path):
    def f(x):
        return F.adaptive_avg_pool2d(x, 1) + 1

    x = torch.randn(2, 3, 7, 7)
    got, kernels = kernels_of(f, (x,), tmp_path)
    torch.testing.assert_close(got, f(x), rtol=1e-5, atol=1e-6)
    assert " reduction " in kernels
