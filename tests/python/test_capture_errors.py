"""Errors eager torch raises from inside its kernels, raised by compiled code too.

Integer // and % by zero, out-of-range gather, index_select, advanced indexing
and embedding: the generated kernels check indices and divisors and the
runtime raises eager's exception type with eager's message, with and without
fullgraph. Valid programs that only look like failing ones (zeros in masked-off
lanes, negative indices of advanced indexing) must not raise. The tests take
the device: test_gpu_capture_errors.py runs them on CUDA, in the GPU suite.
"""
import os
import warnings

import pytest
import torch
import torch.nn.functional as F

import ptc
import ptcio
from like_eager import outcome

# On CUDA the runtime reads the kernels' check record only when asked (it
# costs a stream synchronisation per call; man ptc.7).
os.environ.setdefault("PTC_CUDA_CHECKS", "1")


DEVICES = ["cpu"]


def assert_like_eager(fn, *args, fullgraph=False):
    """Eager runs on the CPU: on CUDA, eager's bad index is a device-side
    assert that ends the process's CUDA context; ptc raises the CPU's error."""
    want = outcome(fn, [a.cpu() for a in args])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager may hide the error
        got = outcome(ptc.compile(fn, fullgraph=fullgraph), args)
    if want[0] == "ok":
        assert got[0] == "ok", got
        torch.testing.assert_close(got[1], want[1], equal_nan=True, check_device=False)
    else:
        assert got == want
    return want


def ints(*v, dev="cpu"):
    return torch.tensor(v, device=dev)


def assign_rows(x, i, v):
    y = x * 2
    y[i] = v
    return y


def assign_columns(x, i, v):
    y = x + 1
    y[:, i] = v
    return y


# (name, function, argument builder); each raises in eager.
FAILING = [
    # item assignment reads arange(n)[i] for its rows, which checks i
    ("assign_rows", assign_rows,
     lambda d: (torch.zeros(4, 3, device=d), ints(1, 9, dev=d), torch.ones(2, 3, device=d))),
    ("assign_rows_negative", assign_rows,
     lambda d: (torch.zeros(4, 3, device=d), ints(-5, dev=d), torch.ones(3, device=d))),
    ("assign_columns", assign_columns,
     lambda d: (torch.zeros(2, 3, device=d), ints(3, dev=d), torch.ones(2, 1, device=d))),
    ("index_put", lambda x, i, v: (x * 1).index_put_((i,), v),
     lambda d: (torch.zeros(4, 3, device=d), ints(0, 4, dev=d), torch.ones(3, device=d))),
    ("floordiv", lambda x, y: x // y, lambda d: (ints(4, 5, 6, dev=d), ints(1, 0, 2, dev=d))),
    ("remainder", lambda x, y: x % y, lambda d: (ints(4, 5, 6, dev=d), ints(1, 0, 2, dev=d))),
    ("floordiv_scalar", lambda x: (x + 1) // 0, lambda d: (ints(4, 5, 6, dev=d),)),
    ("trunc_div", lambda x, y: torch.div(x, y, rounding_mode="trunc"),
     lambda d: (ints(4, 5, 6, dev=d), ints(1, 2, 0, dev=d))),
    ("int32_floordiv", lambda x, y: x // y,
     lambda d: (ints(4, 5, 6, dev=d).int(), ints(1, 0, 2, dev=d).int())),
    ("gather_high", lambda x, i: torch.gather(x, 1, i) * 2,
     lambda d: (torch.randn(3, 4, device=d), ints([0, 4], [1, 2], [0, 0], dev=d))),
    ("gather_negative", lambda x, i: torch.gather(x, 1, i),
     lambda d: (torch.randn(3, 4, device=d), ints([0, -1], [1, 2], [0, 0], dev=d))),
    ("index_select", lambda x, i: torch.index_select(x, 0, i) + 1,
     lambda d: (torch.randn(3, 4, device=d), ints(0, 3, dev=d))),
    ("index_select_negative", lambda x, i: x.index_select(0, i),
     lambda d: (torch.randn(3, 4, device=d), ints(0, -1, dev=d))),
    # torch's CPU kernel for dim 1 words it differently
    ("index_select_dim1", lambda x, i: x.index_select(1, i),
     lambda d: (torch.randn(3, 4, 2, device=d), ints(0, -1, dev=d))),
    ("index_select_dim2", lambda x, i: x.index_select(2, i),
     lambda d: (torch.randn(3, 4, 2, device=d), ints(2, dev=d))),
    ("advanced_index", lambda x, i: x[i] * 2,
     lambda d: (torch.randn(3, 4, device=d), ints(0, 3, dev=d))),
    ("advanced_index_negative", lambda x, i: x[i] * 2,
     lambda d: (torch.randn(3, 4, device=d), ints(0, -4, dev=d))),
    # the second index is out of its dim though the merged offset is in range
    ("advanced_index_two", lambda x, i, j: x[i, j],
     lambda d: (torch.randn(3, 4, device=d), ints(0, 1, dev=d), ints(1, 4, dev=d))),
    ("advanced_index_apart", lambda x, i, j: x[i, :, j],
     lambda d: (torch.randn(3, 2, 5, device=d), ints(0, 2, dev=d), ints(7, 1, dev=d))),
    ("embedding", lambda w, i: F.embedding(i, w),
     lambda d: (torch.randn(5, 4, device=d), ints([0, 5], dev=d))),
    ("embedding_negative", lambda w, i: F.embedding(i, w) + 1,
     lambda d: (torch.randn(5, 4, device=d), ints([0, -1], dev=d))),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("name,fn,make", FAILING, ids=[c[0] for c in FAILING])
def test_error_like_eager(dev, fullgraph, name, fn, make):
    want = assert_like_eager(fn, *make(dev), fullgraph=fullgraph)
    assert want[0] in (RuntimeError, IndexError), want


@pytest.mark.parametrize("dev", DEVICES)
def test_bad_index_in_a_large_parallel_gather(dev):
    # many threads and vector lanes: the one bad index is the one reported
    x = torch.randn(64, 1000, device=dev)
    i = torch.randint(0, 1000, (64, 3000), device=dev)
    i[37, 2001] = 1000
    assert_like_eager(lambda x, i: torch.gather(x, 1, i).sum(1), x, i)


@pytest.mark.parametrize("dev", DEVICES)
def test_the_same_function_runs_after_an_error(dev):
    f = ptc.compile(lambda x, y: x // y)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(ints(1, 2, dev=dev), ints(1, 0, dev=dev))
    assert f(ints(7, -7, dev=dev), ints(2, 2, dev=dev)).tolist() == [3, -4]


VALID = [
    # 13 elements: the vector loop's masked tail reads zeros past the end
    ("tail", lambda x, y: x // y % 3, lambda d: (torch.arange(13, device=d) * 7,
                                                 torch.arange(13, device=d) + 1)),
    # the quotient's padding region computes on zeros that are not divisors
    ("cat", lambda x, y, z: torch.cat([x // y, z]) + 1,
     lambda d: (ints(4, 5, 6, dev=d), ints(1, 3, 2, dev=d), ints(0, 0, dev=d))),
    ("pad", lambda x, y: F.pad(x % y, (2, 3)),
     lambda d: (ints(4, 5, 6, dev=d), ints(1, 3, 2, dev=d))),
    ("assign_rows_negative", assign_rows,
     lambda d: (torch.zeros(4, 3, device=d), ints(-4, 3, dev=d), torch.ones(2, 3, device=d))),
    ("negative_advanced_index", lambda x, i: x[i] + 1,
     lambda d: (torch.randn(3, 4, device=d), ints(-3, -1, 2, dev=d))),
    ("gather_edges", lambda x, i: torch.gather(x, 0, i),
     lambda d: (torch.randn(3, 4, device=d), ints([2, 0, 1, 2], dev=d))),
    ("embedding_last_row", lambda w, i: F.embedding(i, w).sum(-1),
     lambda d: (torch.randn(5, 4, device=d), ints([4, 0], [1, 4], dev=d))),
    ("float_division_by_zero", lambda x, y: (x // y, x % y),
     lambda d: (torch.tensor([1.0, -1.0], device=d), torch.zeros(2, device=d))),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name,fn,make", VALID, ids=[c[0] for c in VALID])
def test_no_error_where_eager_has_none(dev, name, fn, make):
    want = assert_like_eager(fn, *make(dev), fullgraph=True)
    assert want[0] == "ok"


# ---- the same checks through ptc-run: the loop IR, both backends ----------------------------

GRAPH = """# ptc ir v1
graph f(%x: f32[3,4] cpu, %i: i64[3,2] cpu, %a: i64[13] cpu, %b: i64[13] cpu, %j: i64[2] cpu) {
  %0 = gather(%x, 1, %i) : f32[3,2]
  %1 = div(%a, %b, rounding_mode="floor") : i64[13]
  %2 = embedding(%x, %j) : f32[2,4]
  return (%0, %1, %2)
}
"""


def test_loop_ir_holds_the_checks(tmp_path):
    g = tmp_path / "g.ptir"
    g.write_text(GRAPH)
    r = ptcio.ptc_run("--emit=loops", g)
    assert r.returncode == 0, r.stderr
    checks = [line.split("=", 1)[1].split()[:2] for line in r.stdout.splitlines() if "check" in line]
    assert checks == [["check", "INDEX@1"], ["check", "ZERO_DIV@0"], ["check", "INDEX_RANGE@0"]]


@pytest.mark.parametrize("backend,stage", [("reference", "interp"), ("cpu", "check")])
@pytest.mark.parametrize("bad,message", [
    ("i", "RuntimeError: index 5 is out of bounds for dimension 1 with size 4"),
    ("b", "RuntimeError: ZeroDivisionError"),
    ("j", "RuntimeError: IndexError: index out of range in self"),
])
def test_ptc_run_fails_like_eager(tmp_path, backend, stage, bad, message):
    g = tmp_path / "g.ptir"
    g.write_text(GRAPH)
    ins = {"x": torch.randn(3, 4), "i": torch.tensor([[0, 1], [2, 3], [3, 3]]),
           "a": torch.arange(13), "b": torch.arange(13) + 1, "j": torch.tensor([2, 0])}
    ins[bad] = {"i": torch.tensor([[0, 1], [2, 5], [3, 3]]), "b": torch.arange(13) - 4,
                "j": torch.tensor([2, 3])}[bad]
    ptcio.write_tensors(tmp_path / "in.bin", ins)
    r = ptcio.ptc_run("--no-cache", "--backend", backend, "--inputs", tmp_path / "in.bin", g)
    assert r.returncode == 1
    err = r.stderr.strip()
    if backend == "reference":  # its messages name the node; it has no IndexError class
        message = message.replace("IndexError: ", "")
    assert err.startswith(f"ptc-run: {g}: {stage}: {message}"), err
