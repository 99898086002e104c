"""The tensors a compiled call returns: made by torch for each call
(backend_ptc.c new_empty: the bound new_empty of a kept tensor of no elements
per dtype and device, given the sizes one by one, a 0-d output's as ()), so
each is the user's own: eager's dtype, device and values, a fresh contiguous
tensor that no other output, earlier or later, shares memory with."""
import pytest
import torch

import ptc

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.uint8, torch.bool]


def make(dtype, shape):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(0, 100, shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_outputs_are_fresh_tensors_of_eager_dtype(dtype):
    def f(x):
        return x * 2 if dtype != torch.bool else x ^ True

    cf = ptc.compile(f, fullgraph=True)
    torch.manual_seed(0)
    kept = []
    with torch.no_grad():
        for shape in ((3, 5), (3, 5), (4, 7), (0, 7), (2,), (), (2, 1, 3, 1, 2)):
            x = make(dtype, shape)
            out = cf(x)
            want = f(x)
            assert out.dtype == want.dtype and out.device == want.device
            assert out.is_contiguous() and not out.requires_grad
            torch.testing.assert_close(out, want)
            kept.append(out)
    live = [o.data_ptr() for o in kept if o.numel() > 0]
    assert len(set(live)) == len(live), "two live outputs share memory"


def test_writing_an_output_leaves_later_outputs_alone():
    cf = ptc.compile(lambda x: x + 1, fullgraph=True)
    x = torch.zeros(4)
    first = cf(x)
    first.fill_(7)
    torch.testing.assert_close(cf(x), torch.ones(4))
    torch.testing.assert_close(first, torch.full((4,), 7.0))
