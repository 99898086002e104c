"""The externs a compiled backward runs, against eager torch: the
scatter_add of an embedding's weight gradient (a broadcast index, a row of
the weight per token), along other dims, over transposed sources and in
f64, compiled as .ptir graphs with ptc's CPU backend and run on torch
tensors; and the layouts matrix products read and write without copy
kernels (a flattened buffer read in place, a weight's gradient produced in
the weight's layout)."""
import pytest

torch = pytest.importorskip("torch")

from ptc import _C  # noqa: E402
from test_training import compiled_autograd  # noqa: E402,F401


def scatter_graph(dtype, out_shape, dim, index_shape, src_shape, broadcast_index, transpose_src,
                  op="scatter_add"):
    """A prims graph: zeros(out_shape).scatter_add(dim, index, src) (or
    .scatter with op "scatter")."""
    t = {torch.float32: "f32", torch.float64: "f64"}[dtype]
    shape = lambda s: ",".join(map(str, s))  # noqa: E731
    lines = []
    if broadcast_index:  # an embedding's index: one token per row, every column
        idx_in = "%%i: i64[%d] cpu" % index_shape[0]
        lines.append("  %%ib = prims.broadcast_in_dim(%%i, shape=[%s], broadcast_dimensions=[0])"
                     " : i64[%s]" % (shape(index_shape), shape(index_shape)))
    else:
        idx_in = "%%i: i64[%s] cpu" % shape(index_shape)
        lines.append("  %%ib = prims.reshape(%%i, shape=[%s]) : i64[%s]"
                     % (shape(index_shape), shape(index_shape)))
    if transpose_src:
        src_in = "%%s: %s[%s] cpu" % (t, shape(src_shape[::-1]))
        lines.append("  %%sv = prims.permute(%%s, dims=[1, 0]) : %s[%s]" % (t, shape(src_shape)))
    else:
        src_in = "%%s: %s[%s] cpu" % (t, shape(src_shape))
        lines.append("  %%sv = prims.reshape(%%s, shape=[%s]) : %s[%s]"
                     % (shape(src_shape), t, shape(src_shape)))
    lines.append("  %%z = prims.full(shape=[%s], fill_value=0.0, dtype=%s, device=cpu) : %s[%s]"
                 % (shape(out_shape), t, t, shape(out_shape)))
    lines.append("  %%r = prims.%s(%%z, dim=%d, index=%%ib, src=%%sv) : %s[%s]"
                 % (op, dim, t, shape(out_shape)))
    return ("# ptc ir v1\ngraph scatter(%s, %s) {\n%s\n  return (%%r)\n}\n"
            % (idx_in, src_in, "\n".join(lines)))


CASES = [  # out shape, dim, index shape, src shape, broadcast index, transposed src
    ((50, 16), 0, (40, 16), (40, 16), True, False),    # embedding backward
    ((50, 16), 0, (40, 16), (40, 16), True, True),     # its source transposed
    ((7, 30), 1, (7, 45), (7, 45), False, False),      # along the last dim
    ((6, 5), 0, (9, 3), (9, 3), False, True),          # index smaller than out
    ((3, 4), -2, (5, 4), (5, 4), False, False),        # a negative dim
]


@pytest.mark.parametrize("op", ["scatter_add", "scatter"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES)
def test_scatter_add_matches_torch(case, dtype, op):
    """scatter writes the later of two sources that name one place, as
    torch's CPU kernel (which walks dim in order)."""
    out_shape, dim, index_shape, src_shape, bcast, trans = case
    gen = torch.Generator().manual_seed(0)
    rows = out_shape[dim]
    index = torch.randint(0, rows, index_shape[:1] if bcast else index_shape, generator=gen)
    src = torch.randn(src_shape[::-1] if trans else src_shape, generator=gen, dtype=dtype)
    compiled = _C._compile_ptir(scatter_graph(dtype, out_shape, dim, index_shape, src_shape,
                                              bcast, trans, op))
    (got,) = _C._run_compiled(compiled, (index, src))
    full_index = index[:, None].expand(index_shape) if bcast else index
    want = getattr(torch.zeros(out_shape, dtype=dtype), op)(
        dim, full_index, src.t() if trans else src)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["scatter_add", "scatter"])
@pytest.mark.parametrize("bad", [5, -1])
def test_scatter_add_index_out_of_bounds_is_an_error(bad, op):
    """Negative indices too: torch's scatters do not count from the end."""
    compiled = _C._compile_ptir(scatter_graph(torch.float32, (5, 4), 0, (3, 4), (3, 4),
                                              True, False, op))
    with pytest.raises(RuntimeError,
                       match="index %d is out of bounds for dimension 0 with size 5" % bad):
        _C._run_compiled(compiled, (torch.tensor([0, bad, 1]), torch.randn(3, 4)))


# ---- what an extern reads in place ------------------------------------------------------

FLAT_MM = """# ptc ir v1
graph flat(%x: f32[8,16,32] cpu, %w: f32[32,24] cpu) {
  %0 = prims.mul(%x, %x) : f32[8,16,32]
  %1 = prims.reshape(%0, shape=[128, 32]) : f32[128,32]
  %2 = mm(%1, %w) : f32[128,24]
  %3 = prims.sum(%0, dims=[2]) : f32[8,16]
  return (%2, %3)
}
"""


def test_mm_reads_a_flattened_buffer_in_place(tmp_path):
    """[8,16,32] read as [128,32] is 32*o0 + o1: a view, not a copy kernel."""
    import ptcio
    path = tmp_path / "flat.ptir"
    path.write_text(FLAT_MM)
    r = ptcio.ptc_run("--emit=kernels", str(path))
    assert r.returncode == 0, r.stderr
    assert "_copy:" not in r.stdout, r.stdout
    r = ptcio.ptc_run("--check", str(path))
    assert r.returncode == 0, r.stdout + r.stderr


def backward_kernels(tmp_path, fn, *args):
    """The kernels of fn's compiled backward (ptc-run --emit=kernels of its trace)."""
    import glob
    import os
    import ptc
    import ptcio
    trace = tmp_path / "trace"
    old = os.environ.get("PTC_TRACE_DIR")
    os.environ["PTC_TRACE_DIR"] = str(trace)
    try:
        ptc.compile(fn)(*args).sum().backward()
    finally:
        if old is None:
            del os.environ["PTC_TRACE_DIR"]
        else:
            os.environ["PTC_TRACE_DIR"] = old
    (bw,) = glob.glob(str(trace / "*" / "backward.ptir"))
    r = ptcio.ptc_run("--emit=kernels", bw)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_linear_weight_gradient_lands_in_the_weights_layout(tmp_path, compiled_autograd):
    """W's gradient of x @ W^T is computed as G^T x, in W's layout: no kernel
    transposes it afterwards; gradients match torch autograd."""
    gen = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(32, 24)
    x = torch.randn(8, 16, 32, generator=gen)
    kernels = backward_kernels(tmp_path, lin, x)
    assert "_copy:" not in kernels, kernels
    want = torch.autograd.grad(lin(x).sum(), lin.weight)[0]
    lin.weight.grad = None
    import ptc
    ptc.compile(lin)(x).sum().backward()
    torch.testing.assert_close(lin.weight.grad, want, rtol=1e-5, atol=1e-5)


def test_bmm_operand_gradient_lands_in_its_layout(tmp_path, compiled_autograd):
    """k's gradient of q @ k^T (attention scores) is a product in k's layout."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(4, 16, 8, generator=gen, requires_grad=True)
    k = torch.randn(4, 16, 8, generator=gen, requires_grad=True)

    def scores(q, k):
        return torch.tanh(q @ k.transpose(1, 2))
    kernels = backward_kernels(tmp_path, scores, q, k)
    assert "_copy:" not in kernels, kernels
    want = torch.autograd.grad(scores(q, k).sum(), (q, k))
    import ptc
    got = torch.autograd.grad(ptc.compile(scores)(q, k).sum(), (q, k))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


# ---- a convolution's input gradient ----------------------------------------------------


@pytest.mark.parametrize("case", [
    # input shape, weight shape, stride, padding, dilation, output_padding, groups
    ((2, 6, 5, 5), (6, 4, 3, 3), [1, 1], [1, 1], [1, 1], [0, 0], 1),
    ((2, 6, 4, 5), (6, 2, 3, 3), [2, 2], [1, 1], [1, 1], [1, 0], 2),
    ((2, 4, 7), (4, 3, 5), [3], [2], [2], [2], 1),
    ((1, 4, 3, 4, 3), (4, 2, 3, 3, 3), [2, 1, 2], [1, 1, 0], [1, 2, 1], [1, 0, 0], 1),
    ((2, 8, 4, 4), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], [0, 0], 8),  # depthwise
])
def test_transposed_convolution_through_convolution_backward(case):
    """ptc's extern for a transposed convolution (the input gradient of a
    convolution) equals torch.convolution's, with and without bias."""
    from ptc import _eager
    shape, wshape, stride, padding, dilation, output_padding, groups = case
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    w = torch.randn(wshape, generator=gen, dtype=torch.float64)
    b = torch.randn(wshape[1] * groups, generator=gen, dtype=torch.float64)
    for bias in (None, b):
        want = torch.convolution(x, w, bias, stride, padding, dilation, True, output_padding,
                                 groups)
        got = _eager.convolution_transposed(x, w, bias, stride, padding, dilation, True,
                                            output_padding, groups)
        torch.testing.assert_close(got, want)


def test_transposed_convolution_first_in_the_process():
    """A transposed convolution without bias compiled before any other
    convolution of the process ran: main called the torch function of the
    op's slot, not yet imported (a SIGSEGV)."""
    import subprocess
    import sys
    code = ("import torch, ptc, torch.nn.functional as F\n"
            "x, w = torch.randn(2, 4, 5, 5), torch.randn(4, 3, 3, 3)\n"
            "got = ptc.compile(lambda a, b: F.conv_transpose2d(a, b, stride=2))(x, w)\n"
            "torch.testing.assert_close(got, F.conv_transpose2d(x, w, stride=2))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
