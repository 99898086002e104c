"""sort, argsort, topk and cumprod trace into one graph (before, PTC-B007
breaks): sort and topk are extern ops run by torch's own kernels where ptc
has a host (eager's order of ties exactly), by ptc_sort_order's stable merge
sort in ptc-run;
cumprod a scan beside cumsum (prims.cumprod). Gradients: sort's a scatter
by the indices (topk's too), cumprod's torch's cumprod_backward with zeros in the input.
numpy's sort, argsort and cumprod on traced arrays map onto them."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


def one_graph(f, *args):
    ex = ptc.explain(f)(*args)
    assert (ex.graph_count, ex.break_count) == (1, 0), ex.breaks
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns: not here
        return ptc.compile(f, fullgraph=True)(*args)


def same(got, want):
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, (got, want)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True)


def ties(dtype=torch.float32):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 4, (3, 40), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[0, :5] = torch.tensor([float("nan"), -float("inf"), float("inf"), -0.0, 0.0])
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.float16], ids=str)
def test_sort_and_argsort_match_eager_with_ties_and_nans(dtype):
    def f(x):
        return (torch.sort(x, 1), x.sort(dim=0, descending=True), x.t().sort(stable=True, dim=1),
                torch.argsort(x, dim=1, descending=True), x.argsort(), torch.sort(x, stable=True,
                                                                                  dim=0).values)

    x = ties(dtype)
    got = one_graph(f, x)
    same(got, f(x))
    assert type(got[0]) is torch.return_types.sort and got[0].indices.dtype == torch.int64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16], ids=str)
def test_topk_matches_eager_with_ties_and_nans(dtype):
    def f(x):
        return (torch.topk(x, 3), x.topk(2, dim=0, largest=False), torch.topk(x, 5, 1, True, True),
                x.t().topk(1).indices, torch.topk(x, 0).values, torch.topk(x, 40).values)

    x = ties(dtype)
    got = one_graph(f, x)
    same(got, f(x))
    assert type(got[0]) is torch.return_types.topk


@pytest.mark.parametrize("make", [lambda x: x.permute(2, 0, 1), lambda x: x[:, ::2],
                                  lambda x: x.unsqueeze(0).to(memory_format=torch.channels_last),
                                  lambda x: x[:, :1].expand(6, 8, 4), lambda x: x],
                         ids=["transposed", "sliced", "channels_last", "expanded", "contiguous"])
@pytest.mark.parametrize("dim", [0, -1])
def test_sort_results_have_eagers_strides(make, dim):
    """sort's values and indices, and argsort's, are laid out as the input
    where it is dense (torch's empty_like), contiguous otherwise; ptc's came
    back contiguous for a transposed or channels-last input."""
    x = make(torch.randn(6, 8, 4))
    for f in (lambda t: torch.sort(t, dim=dim), lambda t: (torch.argsort(t, dim=dim),)):
        want, got = f(x), one_graph(f, x)
        for g, w in zip(got, want):
            assert torch.equal(g, w) and g.stride() == w.stride(), (g.stride(), w.stride())
            assert g._base is None


def test_sort_of_a_zero_dim_and_an_empty_tensor():
    f = lambda x, e: (torch.sort(x), torch.argsort(e, 0), (x * 2).cumprod(0))  # noqa: E731
    args = torch.tensor(3.0), torch.empty(0, 3)
    same(one_graph(f, *args), f(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.bool], ids=str)
def test_cumprod_matches_eager(dtype):
    def f(x):
        return torch.cumprod(x, 1), x.cumprod(0), torch.cumprod(x, -1, dtype=torch.float64)

    g = torch.Generator().manual_seed(3)
    x = (torch.rand(4, 9, generator=g) * 3).to(dtype)
    same(one_graph(f, x), f(x))


def ptc_run_checks(tmp_path, text, seed):
    """ptc-run's C externs (no torch host) on graph text, checked against
    the reference kernels."""
    import subprocess
    import os
    exe = os.path.join(os.environ.get("PTC_BUILD_DIR", "build"), "tools/run/ptc-run")
    src = tmp_path / "g.ptir"
    src.write_text(text)
    out = subprocess.run([exe, "--backend", "cpu", "--check", "--seed", str(seed), str(src)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ptc_run_sorts_stably_and_scans_products(tmp_path):
    """The C externs (no torch host) against the reference kernels."""
    ptc_run_checks(tmp_path, "# ptc ir v1\ngraph g(%x: f32[2,5] cpu) {\n"
                   "  %0, %1 = sort(%x, dim=1, descending=true, stable=true) : f32[2,5], i64[2,5]\n"
                   "  %2 = cumprod(%x, 1) : f32[2,5]\n"
                   "  %3, %4 = topk(%x, 2, dim=1, largest=false) : f32[2,2], i64[2,2]\n"
                   "  return (%0, %1, %2, %3, %4)\n}\n", 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64,
                                   torch.int32, torch.bool], ids=str)
def test_cummax_and_cummin_match_eager_with_ties_and_nans(dtype):
    """Values and indices as torch's: ties and NaN take the later index,
    nothing but a NaN follows a NaN; torch.return_types.cummax / cummin."""
    def f(x):
        return (torch.cummax(x, 1), x.cummin(dim=1), torch.cummax(x, 0), torch.cummin(x.t(), 0),
                torch.cummax(x[:, 0], -1))

    x = ties(dtype)
    got, want = one_graph(f, x), f(x)
    assert [type(g).__name__ for g in got] == [type(w).__name__ for w in want]
    same(got, want)


def test_ptc_run_scans_running_extremes(tmp_path):
    """cummax / cummin's C externs (no torch host) against the reference,
    over ties, NaN and integers."""
    ptc_run_checks(tmp_path, "# ptc ir v1\ngraph g(%x: f32[3,6] cpu) {\n"
                   "  %r = round(%x) : f32[3,6]\n"
                   "  %l = log(%r) : f32[3,6]\n"
                   "  %0, %1 = cummax(%l, 1) : f32[3,6], i64[3,6]\n"
                   "  %2, %3 = cummin(%r, 0) : f32[3,6], i64[3,6]\n"
                   "  %k = to(%r, dtype=i64) : i64[3,6]\n"
                   "  %4, %5 = cummax(%k, 0) : i64[3,6], i64[3,6]\n"
                   "  %6, %7 = cummin(%k, -1) : i64[3,6], i64[3,6]\n"
                   "  return (%0, %1, %2, %3, %4, %5, %6, %7)\n}\n", 5)


@pytest.fixture
def compiled_autograd():
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = False


def grads(f, *args):
    """f's input gradients, eager's and ptc's (no autograd fallback)."""
    eager = [a.clone().requires_grad_() for a in args]
    comp = [a.clone().requires_grad_() for a in args]
    out = f(*eager)
    w = torch.arange(1.0, out.numel() + 1, dtype=out.dtype).reshape(out.shape)
    (out * w).sum().backward()
    (ptc.compile(f, fullgraph=True)(*comp) * w).sum().backward()
    ex = ptc.explain(f, backend="ptc")(*[a.clone().requires_grad_() for a in args])
    assert not ex.autograd_fallback and ex.break_count == 0
    return [a.grad for a in eager], [a.grad for a in comp]


@pytest.mark.parametrize("f", [lambda t: torch.sort(t * 2, 1, descending=True).values,
                               lambda t: torch.topk(t * 2, 2, dim=0).values,
                               lambda t: torch.cummax(t * 2, 1).values,
                               lambda t: torch.cummin(t * 2, 0).values],
                         ids=["sort", "topk", "cummax", "cummin"])
def test_sort_and_topk_gradients_scatter_by_the_indices(compiled_autograd, f):
    x = torch.randn(3, 6, dtype=torch.float64)
    want, got = grads(f, x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert torch.autograd.gradcheck(ptc.compile(f), (x.clone().requires_grad_(),))


@pytest.mark.parametrize("zeros", [[], [(0, 2)], [(0, 2), (0, 4)], [(1, 0), (2, 5)]],
                         ids=["none", "one", "two", "first-last"])
def test_cumprod_gradient_with_zeros_matches_torch(compiled_autograd, zeros):
    g = torch.Generator().manual_seed(8)
    x = torch.rand(3, 6, generator=g, dtype=torch.float64) + 0.5
    for i, j in zeros:
        x[i, j] = 0.0
    f = lambda t: torch.cumprod(t * 1.0, 1)  # noqa: E731
    want, got = grads(f, x)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    if len(zeros) < 2:  # cumprod is smooth there: finite differences hold
        assert torch.autograd.gradcheck(ptc.compile(f), (x.clone().requires_grad_(),))


def test_numpy_sort_argsort_cumprod_on_traced_arrays():
    def f(x):
        a = x.numpy()
        return (np.sort(a, axis=1), np.argsort(-a, axis=0), np.sort(a, axis=None),
                np.argsort(a), np.cumprod(a, axis=1), np.cumprod(a), a.cumprod(axis=0),
                a.argsort(axis=1), np.cumprod(a.astype(np.int32), axis=1))

    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(2), dtype=torch.float64) / 4 + 1
    got, want = one_graph(f, x), f(x)
    same(got, want)
    assert got[1].dtype == np.int64 and got[8].dtype == want[8].dtype


def test_numpy_stable_sorts_keep_the_order_of_ties():
    """kind="stable" as numpy's: ties in input order (numpy's default
    quicksort may order ties of long lines otherwise; ptc always sorts
    stably, and torch.compile unstably)."""
    def f(x):
        a = x.numpy()
        return np.argsort(a, axis=1, kind="stable"), np.sort(a, kind="mergesort", axis=0)

    x = ties()
    same(one_graph(f, x), f(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("backend", ["ptc", "eager"])
def test_on_cuda_results_and_gradients_are_eagers(compiled_autograd, backend):
    """CUDA: sort, topk, cummax and cummin run as torch's (eager's order of
    ties), cumprod as torch.cumprod; the gradients' scatter and scans
    through torch too."""
    def f(x):
        s = torch.sort(x, 1, descending=True)
        return (s.values * 2, s.indices, torch.argsort(x, dim=0), torch.cumprod(x, 1),
                *torch.topk(x, 7, dim=1), *torch.cummax(x, 1), *torch.cummin(x, 0))

    x = ties(torch.float32).cuda()
    got = ptc.compile(f, fullgraph=True, backend=backend)(x)
    for g, w in zip(got, f(x)):
        assert g.device == w.device and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-6, atol=0, equal_nan=True)
    xg = torch.rand(4, 300, dtype=torch.float64, device="cuda") + 0.5
    xg[1, 7] = xg[2, 0] = xg[2, 9] = 0.0
    loss = lambda t: ((torch.sort(t, 1).values * torch.cumprod(t, 1)).sum()  # noqa: E731
                      + torch.topk(t, 3, dim=0).values.sum()
                      + (torch.cummax(t, 1).values * torch.cummin(t, 0).values).sum())
    a, b = xg.clone().requires_grad_(), xg.clone().requires_grad_()
    loss(a).backward()
    ptc.compile(loss, fullgraph=True, backend=backend)(b).backward()
    torch.testing.assert_close(b.grad, a.grad, rtol=1e-10, atol=1e-10)
