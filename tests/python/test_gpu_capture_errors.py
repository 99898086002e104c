"""test_capture_errors.py's cases on CUDA, in the GPU suite.

With PTC_CUDA_CHECKS=1 a failed check raises the CPU's error at once: eager
on CUDA would raise nothing (an integer division by zero) or stop the
process's CUDA context with a device-side assert (an index out of range), so
ptc must not run the failing part again eagerly there, as it does on the
CPU. One device-side assert would fail every test after it in the process.
"""
import pytest
import torch

import test_capture_errors as cases

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device visible to torch")


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("name,fn,make", cases.FAILING, ids=[c[0] for c in cases.FAILING])
def test_error_like_eager(fullgraph, name, fn, make):
    cases.test_error_like_eager("cuda", fullgraph, name, fn, make)


def test_bad_index_in_a_large_parallel_gather():
    cases.test_bad_index_in_a_large_parallel_gather("cuda")


def test_the_same_function_runs_after_an_error():
    cases.test_the_same_function_runs_after_an_error("cuda")


@pytest.mark.parametrize("name,fn,make", cases.VALID, ids=[c[0] for c in cases.VALID])
def test_no_error_where_eager_has_none(name, fn, make):
    cases.test_no_error_where_eager_has_none("cuda", name, fn, make)


def test_writes_before_the_failing_op_are_not_rerun_on_cuda():
    # on the CPU the segment runs again eagerly and appends; on CUDA that
    # rerun would end the CUDA context, so the error comes at once
    log = []

    def f(x, i):
        log.append(1)
        return torch.gather(x * 2, 0, i)

    x, i = torch.ones(4, device="cuda"), cases.ints(0, 7, dev="cuda")
    with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension 0 with size 4"):
        cases.ptc.compile(f)(x, i)
    torch.cuda.synchronize()  # no device-side assert is pending
    assert log == []
