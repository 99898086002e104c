"""Reductions over leading dims (the column sums of bias and LayerNorm weight
gradients: [2048, 1024] summed over its rows) against eager torch: the CPU
kernel runs its lanes along the kept, contiguous dim and reads rows whole
instead of gathering each lane from another row."""
import glob
import os

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from test_training import compiled_autograd  # noqa: E402,F401


def run_with_trace(fn, x, tmp_path):
    """fn compiled and called on x, its trace written to tmp_path."""
    ptc.config.trace_dir = str(tmp_path)
    try:
        return ptc.compile(fn, fullgraph=True)(x)
    finally:
        ptc.config.trace_dir = None


def kernel_ir(tmp_path):
    files = glob.glob(os.path.join(str(tmp_path), "**", "kernel_*.ll"), recursive=True)
    assert files, "no kernel_*.ll in the trace"
    return "\n".join(open(f).read() for f in files)


@pytest.mark.parametrize("shape, dims", [
    ((2049, 1000), (0,)),       # neither a multiple of the block nor of the lanes
    ((3, 5), (0,)),
    ((1, 17), (0,)),
    ((130, 70), (0,)),
    ((4, 33, 96), (0, 1)),      # a LayerNorm weight gradient's batch and sequence
    ((6, 5, 40), (1,)),         # a kept dim before the reduced one: not a column sum
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_column_sums_match_eager(shape, dims, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, dtype=dtype)
    g = torch.randn(shape, generator=gen, dtype=dtype)

    def f(x, g):
        return (x * g).sum(dims), g.sum(dims)

    got = ptc.compile(f, fullgraph=True)(x, g)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for a, b in zip(got, f(x, g)):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * shape[0])


@pytest.mark.parametrize("op", ["amax", "amin", "prod"])
def test_column_extrema_and_products_match_eager(op):
    gen = torch.Generator().manual_seed(1)
    x = 1 + 0.01 * torch.randn(300, 75, generator=gen)
    x[7, 3] = float("nan")
    fn = lambda t: getattr(t, op)(0)  # noqa: E731
    torch.testing.assert_close(ptc.compile(fn, fullgraph=True)(x), fn(x), equal_nan=True)


def test_column_sum_reads_rows_whole(tmp_path):
    """The kernel of a column sum loads vectors of a row; main gathered each
    lane from another row (44-91 ms against eager's 1.4-2 ms for 2048x1024)."""
    x = torch.randn(256, 128)
    got = run_with_trace(lambda t: t.sum(0), x, tmp_path)
    torch.testing.assert_close(got, x.sum(0), rtol=1e-5, atol=1e-4)
    ir = kernel_ir(tmp_path)
    assert "llvm.masked.gather" not in ir, ir


def test_layer_norm_weight_gradient_reads_rows_whole(tmp_path):
    """A LayerNorm weight gradient's column sum also reads each row's mean and
    rstd, one value for all lanes: still the column form (2048x1024: 1.1 ms,
    main's gathers 327 ms)."""
    gen = torch.Generator().manual_seed(3)
    x, g = torch.randn(256, 128, generator=gen), torch.randn(256, 128, generator=gen)
    mean = x.mean(1, keepdim=True)
    rstd = (x.var(1, keepdim=True, unbiased=False) + 1e-5).rsqrt()

    def grads(args):
        x, g, mean, rstd = args
        return (g * ((x - mean) * rstd)).sum(0), g.sum(0)

    got = run_with_trace(grads, (x, g, mean, rstd), tmp_path)
    for a, b in zip(got, grads((x, g, mean, rstd))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
    assert "llvm.masked.gather" not in kernel_ir(tmp_path)


def test_row_sum_keeps_lanes_along_the_row(tmp_path):
    """A sum along contiguous rows keeps the usual loop (a vector load of the
    row, lanes combined at the end), not the column form."""
    x = torch.randn(128, 256)
    got = run_with_trace(lambda t: t.sum(1), x, tmp_path)
    torch.testing.assert_close(got, x.sum(1), rtol=1e-5, atol=1e-4)
    ir = kernel_ir(tmp_path)
    assert "llvm.masked.gather" not in ir and "block" not in ir, ir


def test_layer_norm_and_linear_gradients(compiled_autograd):  # noqa: F811
    """LayerNorm's weight and bias gradients and a Linear's bias gradient are
    column sums over batch and sequence: compiled gradients match torch's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.LayerNorm(64),
                                torch.nn.GELU(), torch.nn.Linear(64, 32))
    x = torch.randn(4, 37, 48)
    want = torch.autograd.grad(model(x).square().sum(), list(model.parameters()))
    got = torch.autograd.grad(ptc.compile(model)(x).square().sum(), list(model.parameters()))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_column_sums_with_symbolic_sizes():
    """Rows and columns as symbols: one compiled kernel serves every size."""
    fn = lambda t: (t * 2).sum(0)  # noqa: E731
    cf = ptc.compile(fn, dynamic=True)
    for shape in [(37, 70), (5, 129), (64, 1)]:
        x = torch.randn(shape)
        torch.testing.assert_close(cf(x), fn(x), rtol=1e-5, atol=1e-4)
