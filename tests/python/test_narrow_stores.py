"""Narrow stores (compiler/lower/inline.c, ptc_store_narrow_pass): a kept
temporary whose value is a float widened exactly from a narrower one is
stored narrow and widened by its readers as they load it. Autocast makes
such values: BatchNorm's bf16 output read back as f32 by relu and a
max-pool's window was kept as f32 in resnet50's training forward, 98 MiB
of a 32-image batch's arena on an H100 (ptc's peak 1965 MiB against eager's
1883). The values are the same."""
import re

import torch
import torch.nn.functional as F

from ptcio import traced


def kept_dtypes(kernels):
    """The dtypes of the temporaries kept between loops: the memory plan's
    arena buffers and the kernels' local ones."""
    plan = kernels[kernels.index("\nmemory: arena"):]
    return (re.findall(r"^  buf\d+: (\w+)\[", plan, re.M) +
            re.findall(r"^  local buf\d+: (\w+)\[", kernels, re.M))


def bf16_read_back_by_a_pool(x, s):
    b = ((x * s).exp().sin() * 3 + 1).to(torch.bfloat16)  # kept: the pool reads it 9 times
    return F.max_pool2d(b.float().relu(), 3, 2, 1)


def test_a_widened_bf16_value_is_kept_as_bf16(tmp_path):
    torch.manual_seed(0)
    x, s = torch.randn(2, 8, 32, 32), torch.randn(8, 1, 1)
    out, kernels, _ = traced(bf16_read_back_by_a_pool, x, s, tmp_path=tmp_path)
    assert torch.equal(out, bf16_read_back_by_a_pool(x, s))
    assert kept_dtypes(kernels) == ["bf16"], kernels


def f32_read_back_as_f64(x):
    y = ((x * 0.25).exp() * 3 + x).double()
    return y[:, None, :] * y[:, :, None]  # every element read once per row and column


def test_a_widened_f32_value_is_kept_as_f32(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(4, 64)
    out, kernels, _ = traced(f32_read_back_as_f64, x, tmp_path=tmp_path)
    # computed in f32 (ptc's exp is its own): f32's tolerance
    torch.testing.assert_close(out, f32_read_back_as_f64(x), rtol=1e-5, atol=1e-5)
    assert kept_dtypes(kernels) == ["f32"], kernels
