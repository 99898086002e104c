"""Reductions of a few elements per output (pooling windows) are unrolled
into pointwise kernels, vectorised along the output's inner dim (unroll.c);
max_pool2d's unread indices are not computed. Results equal eager's,
NaN and -inf included. Returned indices (max_pool2d's return_indices, its
backward in training, argmax over a few elements) are unrolled too: a scan
that keeps the first index of the max, and of NaNs the last in max_pool2d
(torch's `val > max || isnan(val)`) but the first in argmax and max(dim)."""
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


def nan_and_inf_windows(dtype):
    """Windows holding several NaNs (the index is the last one's), ties
    (the first), and all -inf beside the padding (the first point inside)."""
    x = special_values(torch.randn(2, 5, 11, 9))
    x[0, 0, :3, :3] = torch.tensor([[1.0, float("nan"), 3.0], [float("nan"), 2.0, 0.0], [5, 5, 1]])
    x[0, 1] = float("-inf")
    x[1, 2, 4:7, 4:7] = 7.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_returned_indices_are_unrolled_and_equal_eager(dtype, tmp_path):
    def f(x):
        return (F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
                F.max_pool2d(x, 2, return_indices=True),
                F.max_pool2d(x, 3, stride=1, padding=1, dilation=2, return_indices=True))

    x = nan_and_inf_windows(dtype)
    got, kernels = kernels_of(f, (x,), tmp_path)
    for (v, i), (ve, ie) in zip(got, f(x)):
        torch.testing.assert_close(v, ve, equal_nan=True)
        assert torch.equal(i, ie)
    assert " reduction " not in kernels and "argmax" not in kernels, kernels


def test_small_argmax_is_unrolled_and_keeps_the_first_nan(tmp_path):
    def f(x):
        v, i = x.max(dim=-1)
        return v, i, x.argmin(dim=1), x.argmax(dim=-1)

    x = torch.randn(6, 4, 5)
    x[0, 0] = torch.tensor([1.0, float("nan"), 3.0, float("nan"), 0.0])
    x[1, :, 2] = float("nan")
    x[2, 1] = 4.0
    got, kernels = kernels_of(f, (x,), tmp_path)
    for g, e in zip(got, f(x)):
        torch.testing.assert_close(g, e, equal_nan=True)
    assert " reduction " not in kernels, kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool_backward_with_compiled_autograd_equals_eager(dtype, tmp_path):
    """The gradient goes where the unrolled index says: to the last NaN of a
    window, the first of tied maxima, the first point inside an all -inf
    window, as eager's."""
    def f(x):
        return (F.max_pool2d(x, 3, stride=2, padding=1) * 2).sum()

    old = ptc.config.compiled_autograd
    ptc.config.compiled_autograd = True
    ptc.config.trace_dir = str(tmp_path)
    try:
        x = nan_and_inf_windows(dtype).requires_grad_()
        xe = x.detach().clone().requires_grad_()
        ptc.compile(f, fullgraph=True)(x).backward()
    finally:
        ptc.config.compiled_autograd = old
        ptc.config.trace_dir = None
    f(xe).backward()
    assert torch.equal(x.grad, xe.grad)
    names = {n for _, _, files in os.walk(tmp_path) for n in files}
    assert "backward.ptir" in names
    kernels = "".join(open(os.path.join(d, n)).read() for d, _, files in os.walk(tmp_path)
                      for n in files if n == "kernels.txt")
    assert "max_pool" in kernels and "argmax" not in kernels, kernels


def test_large_windows_stay_reductions(tmp_path):
    def f(x):
        return F.adaptive_avg_pool2d(x, 1) + 1

    x = torch.randn(2, 3, 7, 7)
    got, kernels = kernels_of(f, (x,), tmp_path)
    torch.testing.assert_close(got, f(x), rtol=1e-5, atol=1e-6)
    assert " reduction " in kernels


def test_large_window_indices_equal_eager(tmp_path):
    """A 5x5 window stays a reduction; its argmax keeps max_pool2d's rules:
    the last NaN, the first of ties, the first point inside an all -inf
    window."""
    def f(x):
        return F.max_pool2d(x, 5, stride=2, padding=2, return_indices=True)

    x = nan_and_inf_windows(torch.float32)
    (v, i), kernels = kernels_of(f, (x,), tmp_path)
    ve, ie = f(x)
    torch.testing.assert_close(v, ve, equal_nan=True)
    assert torch.equal(i, ie)
    assert "argmax nan_last" in kernels, kernels
