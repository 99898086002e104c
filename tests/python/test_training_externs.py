"""The C externs a compiled backward runs, against eager torch: the
scatter_add of an embedding's weight gradient (a broadcast index, a row of
the weight per token), along other dims, over transposed sources and in
f64, compiled as .ptir graphs with ptc's CPU backend and run on torch
tensors."""
import pytest

torch = pytest.importorskip("torch")

from ptc import _C  # noqa: E402


def scatter_graph(dtype, out_shape, dim, index_shape, src_shape, broadcast_index, transpose_src):
    """A prims graph: zeros(out_shape).scatter_add(dim, index, src)."""
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
    lines.append("  %%r = prims.scatter_add(%%z, dim=%d, index=%%ib, src=%%sv) : %s[%s]"
                 % (dim, t, shape(out_shape)))
    return ("# ptc ir v1\ngraph scatter(%s, %s) {\n%s\n  return (%%r)\n}\n"
            % (idx_in, src_in, "\n".join(lines)))


CASES = [  # out shape, dim, index shape, src shape, broadcast index, transposed src
    ((50, 16), 0, (40, 16), (40, 16), True, False),    # embedding backward
    ((50, 16), 0, (40, 16), (40, 16), True, True),     # its source transposed
    ((7, 30), 1, (7, 45), (7, 45), False, False),      # along the last dim
    ((6, 5), 0, (9, 3), (9, 3), False, True),          # index smaller than out
    ((3, 4), -2, (5, 4), (5, 4), False, False),        # a negative dim
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES)
def test_scatter_add_matches_torch(case, dtype):
    out_shape, dim, index_shape, src_shape, bcast, trans = case
    gen = torch.Generator().manual_seed(0)
    rows = out_shape[dim]
    index = torch.randint(0, rows, index_shape[:1] if bcast else index_shape, generator=gen)
    src = torch.randn(src_shape[::-1] if trans else src_shape, generator=gen, dtype=dtype)
    compiled = _C._compile_ptir(scatter_graph(dtype, out_shape, dim, index_shape, src_shape,
                                              bcast, trans))
    (got,) = _C._run_compiled(compiled, (index, src))
    full_index = index[:, None].expand(index_shape) if bcast else index
    want = torch.zeros(out_shape, dtype=dtype).scatter_add(
        dim, full_index, src.t() if trans else src)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_scatter_add_index_out_of_bounds_is_an_error():
    compiled = _C._compile_ptir(scatter_graph(torch.float32, (5, 4), 0, (3, 4), (3, 4),
                                              True, False))
    with pytest.raises(Exception, match="out of bounds"):
        _C._run_compiled(compiled, (torch.tensor([0, 5, 1]), torch.randn(3, 4)))
