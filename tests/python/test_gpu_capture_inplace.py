"""In-place writes to the caller's CUDA tensors (test_capture_inplace_inputs.py's
cases on the device, skipped without a GPU): an argument, its basic views
and a default argument written in place are one graph whose new values are
copied into the caller's tensors after it, on the current stream, with the
ptc backend's kernels; an argument sharing memory with a written one still
matches eager. A few seconds on an H100."""
import pytest
import torch

import ptc
import test_capture_inplace_inputs as cases
from gpucheck import require_gpu


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


def run_both(fn, make_args):
    compiled = ptc.compile(fn, backend="ptc")
    for _ in range(2):
        want_args, got_args = make_args(), make_args()
        want, got = fn(*want_args), compiled(*got_args)
        torch.cuda.synchronize()
        assert torch.allclose(want, got), (want, got)
        for w, g in zip(want_args, got_args):
            assert torch.equal(w, g), (w, g)
    return compiled


def test_argument_and_its_views_written_in_place_cuda():
    c = run_both(cases.adds_to_its_argument, lambda: (torch.arange(4.0, device="cuda"),))
    assert cases.counts(c) == (1, 0, [])
    c = run_both(cases.writes_through_views_of_its_argument,
                 lambda: (torch.arange(6.0, device="cuda").reshape(2, 3),))
    assert cases.counts(c) == (1, 0, [])


def test_argument_sharing_memory_with_a_written_one_cuda():
    run_both(cases.aliased_read_after_write,
             lambda: (lambda a: (a, a[0]))(torch.arange(6.0, device="cuda").reshape(2, 3)))


def test_default_argument_written_in_place_cuda():
    acc = torch.zeros(3, device="cuda")

    def fills(x, acc=acc):
        acc.add_(x)
        return acc * 1

    compiled = ptc.compile(fills, backend="ptc")
    for call in range(1, 4):
        out = compiled(torch.ones(3, device="cuda"))
        assert torch.equal(out.cpu(), torch.full((3,), float(call))) and torch.equal(acc, out)
    assert cases.counts(compiled) == (1, 0, [])
