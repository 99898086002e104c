"""Ops added through the op table (compiler/ir/pointwise.def, from which
ops.def's elementwise rows come): one row each, plus the functions it names. logit is the walk-through: its
captured graph holds one logit node, compiled results match eager torch in
every float dtype, with and without eps, and its gradient (through its prims)
matches eager's and central finite differences. frac is the experiment of
issue 14 (a pointwise op built from prims that exist): its pointwise.def
row, its decomposition pw_frac and its reference test.
copysign walks a new prim through: its two pointwise.def rows (the prim's
emit column names llvm.copysign) and its derivative d_copysign."""
import os
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


def inputs(dtype, shape=(4, 33)):
    g = torch.Generator().manual_seed(7)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * 1.2 - 0.1  # some outside [0, 1]
    x[0, :4] = torch.tensor([0.0, 1.0, float("nan"), 0.5], dtype=torch.float64)
    return x.to(dtype)


TOL = {torch.float64: 1e-12, torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def assert_close(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("eps", [None, 0.0, 1e-3, 0.25, -1.0])
def test_logit_matches_eager(dtype, eps):
    x = inputs(dtype)
    fn = (lambda t: torch.logit(t)) if eps is None else (lambda t: torch.logit(t, eps))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns: not here
        got = ptc.compile(fn, fullgraph=True)(x)
    assert_close(got, fn(x), dtype)


def test_logit_spellings_capture_one_node_each(tmp_path):
    x = inputs(torch.float32)

    def f(t):
        return (torch.logit(t, 0.1) + t.logit(eps=0.2) + torch.special.logit(t, 0.3)
                + t.clone().logit_(0.05) + torch.logit(t))

    ptc.config.trace_dir = str(tmp_path)
    try:
        got = ptc.compile(f, fullgraph=True)(x)
    finally:
        ptc.config.trace_dir = None
    assert_close(got, f(x), torch.float32)
    captured = [os.path.join(d, n) for d, _, files in os.walk(tmp_path) for n in files
                if n == "captured.ptir"]
    assert len(captured) == 1
    text = open(captured[0]).read()
    assert text.count(" = logit(") == 5, text
    assert "clamp(" not in text and "div(" not in text, text


def test_logit_of_integers_is_float():
    x = torch.tensor([0, 1, 2], dtype=torch.int64)
    got = ptc.compile(lambda t: torch.logit(t), fullgraph=True)(x)
    want = torch.logit(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.fixture
def compiled_autograd():
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = False


@pytest.mark.parametrize("eps", [None, 0.2])
def test_logit_gradient_matches_eager_and_finite_differences(compiled_autograd, eps):
    g = torch.Generator().manual_seed(3)
    # inside (0, 1), away from the clamp's corners (where the gradient jumps)
    x = (torch.rand(3, 7, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    if eps is not None:
        x = x[(x - eps).abs() > 1e-3].reshape(-1)
        x = x[(x - (1 - eps)).abs() > 1e-3]

    def f(t):
        return torch.logit(t * 1.0, eps) * 1.5

    compiled = ptc.compile(f)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    f(xe).sum().backward()
    compiled(xc).sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-10, atol=1e-12)
    ex = ptc.explain(f, backend="ptc")(x.clone().requires_grad_())
    assert not ex.autograd_fallback
    # central differences of the compiled function itself
    assert torch.autograd.gradcheck(compiled, (x.clone().requires_grad_(),), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_frac_matches_eager(dtype):
    x = (inputs(torch.float64) * 40 - 20).to(dtype)
    x[1, :5] = torch.tensor([float("inf"), -float("inf"), -0.0, -2.5, 7.0]).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns: not here
        got = ptc.compile(lambda t: torch.frac(t) + t.frac() * 2, fullgraph=True)(x)
    assert_close(got, torch.frac(x) + x.frac() * 2, dtype)


def test_frac_of_integers_raises_as_eager():
    x = torch.tensor([1, 2], dtype=torch.int64)
    with pytest.raises(RuntimeError) as want:
        torch.frac(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as got:
            ptc.compile(lambda t: torch.frac(t))(x)
    assert str(got.value) == str(want.value)


def test_frac_gradient_matches_eager_and_finite_differences(compiled_autograd):
    g = torch.Generator().manual_seed(5)
    x = torch.rand(3, 7, generator=g, dtype=torch.float64) * 9 - 4.5
    x = x[(x - x.round()).abs() > 1e-3]  # away from the jumps at integers

    def f(t):
        return torch.frac(t * 1.0) * 1.5

    compiled = ptc.compile(f)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    f(xe).sum().backward()
    compiled(xc).sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-10, atol=1e-12)
    assert not ptc.explain(f, backend="ptc")(x.clone().requires_grad_()).autograd_fallback
    assert torch.autograd.gradcheck(compiled, (x.clone().requires_grad_(),), eps=1e-6, atol=1e-6)


def pair(dtype):
    """Two operands with the edges of logaddexp: equal and opposite
    infinities, nan, -0.0 against 0.0, equal values and far-apart ones."""
    g = torch.Generator().manual_seed(11)
    a = torch.randn(4, 33, generator=g, dtype=torch.float64) * 6
    b = torch.randn(4, 33, generator=g, dtype=torch.float64) * 6
    inf, nan = float("inf"), float("nan")
    a[0, :8] = torch.tensor([inf, -inf, inf, -inf, nan, -0.0, 3.0, 80.0], dtype=torch.float64)
    b[0, :8] = torch.tensor([inf, -inf, -inf, 2.0, 1.0, 0.0, 3.0, -80.0], dtype=torch.float64)
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_logaddexp_matches_eager(dtype):
    # logaddexp is the second experiment of issue 14 (a binary op): one
    # pointwise.def row, pw_logaddexp, the reference formula and
    # meta_binary_float_only
    a, b = pair(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns: not here
        got = ptc.compile(lambda x, y: torch.logaddexp(x, y) - x.logaddexp(y * 2),
                          fullgraph=True)(a, b)
    assert_close(got, torch.logaddexp(a, b) - a.logaddexp(b * 2), dtype)


def test_logaddexp_promotes_as_eager():
    a, b = pair(torch.float16)
    got = ptc.compile(lambda x, y: torch.logaddexp(x, y), fullgraph=True)(a, b.double())
    want = torch.logaddexp(a, b.double())
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want, equal_nan=True)


def test_logaddexp_of_integers_raises_as_eager():
    x = torch.tensor([1, 2], dtype=torch.int64)
    with pytest.raises(NotImplementedError) as want:
        torch.logaddexp(x, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError) as got:
            ptc.compile(lambda t: torch.logaddexp(t, t))(x)
    assert str(got.value) == str(want.value)


def test_logaddexp_gradient_matches_eager_and_finite_differences(compiled_autograd):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(3, 7, generator=g, dtype=torch.float64) * 4
    b = torch.randn(3, 7, generator=g, dtype=torch.float64) * 4  # no ties: max's kink

    def f(x, y):
        return torch.logaddexp(x * 1.0, y) * 1.5

    compiled = ptc.compile(f)
    ae, be = a.clone().requires_grad_(), b.clone().requires_grad_()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    f(ae, be).sum().backward()
    compiled(ac, bc).sum().backward()
    torch.testing.assert_close(ac.grad, ae.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(bc.grad, be.grad, rtol=1e-10, atol=1e-12)
    ex = ptc.explain(f, backend="ptc")(a.clone().requires_grad_(), b.clone().requires_grad_())
    assert not ex.autograd_fallback
    assert torch.autograd.gradcheck(compiled, (a.clone().requires_grad_(),
                                               b.clone().requires_grad_()), eps=1e-6, atol=1e-6)


def signed_pair(dtype):
    """x and y for copysign: signed zeros, infinities and nans of both signs on
    either side, and random values."""
    g = torch.Generator().manual_seed(13)
    x = torch.randn(4, 33, generator=g, dtype=torch.float64) * 3
    y = torch.randn(4, 33, generator=g, dtype=torch.float64) * 3
    inf, nan = float("inf"), float("nan")
    x[0, :8] = torch.tensor([0.0, -0.0, inf, -inf, nan, -nan, 2.5, -2.5], dtype=torch.float64)
    y[0, :8] = torch.tensor([-0.0, 0.0, -1.0, 1.0, -3.0, 3.0, -nan, nan], dtype=torch.float64)
    y[1, :4] = torch.tensor([-inf, inf, -0.0, 0.0], dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def assert_same_bits(got, want):
    """copysign is exact: every value, the sign of every zero and nan included."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(torch.signbit(got), torch.signbit(want))
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_copysign_matches_eager(dtype):
    # copysign is the walk-through of issue 14 item 2 with a new prim: rows in
    # pointwise.def (the emit column's llvm.copysign) and d_copysign
    x, y = signed_pair(dtype)

    def f(a, b):
        return torch.copysign(a, b), a.copysign(b[1]), torch.copysign(a, -0.0), a.copysign(2)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns: not here
        got = ptc.compile(f, fullgraph=True)(x, y)
    for g, w in zip(got, f(x, y)):
        assert_same_bits(g, w)


def test_copysign_spellings_capture_one_node_each(tmp_path):
    x, y = signed_pair(torch.float32)

    def f(a, b):
        return torch.copysign(a, b) + a.copysign(b) + a.clone().copysign_(b)

    ptc.config.trace_dir = str(tmp_path)
    try:
        got = ptc.compile(f, fullgraph=True)(x, y)
    finally:
        ptc.config.trace_dir = None
    torch.testing.assert_close(got, f(x, y), rtol=0, atol=0, equal_nan=True)
    captured = [os.path.join(d, n) for d, _, files in os.walk(tmp_path) for n in files
                if n == "captured.ptir"]
    assert len(captured) == 1
    assert open(captured[0]).read().count(" = copysign(") == 3


@pytest.mark.parametrize("da, db", [(torch.int64, torch.int64), (torch.int32, torch.float16),
                                    (torch.bool, torch.float64), (torch.float16, torch.bfloat16),
                                    (torch.uint8, torch.int8)])
def test_copysign_promotes_as_eager(da, db):
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(3, 5, generator=g) * 9).to(da)
    b = (torch.randn(5, generator=g) * 9).to(db)  # broadcast along the rows
    got = ptc.compile(lambda p, q: torch.copysign(p, q), fullgraph=True)(a, b)
    assert_same_bits(got, torch.copysign(a, b))


def test_copysign_reference_backend_matches_eager():
    x, y = signed_pair(torch.float32)
    got = ptc.compile(lambda a, b: torch.copysign(a, b), backend="reference", fullgraph=True)(x, y)
    assert_same_bits(got, torch.copysign(x, y))


def test_copysign_gradient_matches_eager_and_finite_differences(compiled_autograd):
    g = torch.Generator().manual_seed(9)
    a = torch.randn(3, 7, generator=g, dtype=torch.float64)
    b = torch.randn(3, 7, generator=g, dtype=torch.float64)
    a[0, 0] = 0.0  # torch's gradient there is 0

    def f(x, y):
        return torch.copysign(x * 1.5, y) * torch.arange(7.0, dtype=torch.float64)

    compiled = ptc.compile(f, fullgraph=True)
    ae, be = a.clone().requires_grad_(), b.clone().requires_grad_()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    f(ae, be).sum().backward()
    compiled(ac, bc).sum().backward()
    torch.testing.assert_close(ac.grad, ae.grad, rtol=1e-12, atol=0)
    torch.testing.assert_close(bc.grad, be.grad, rtol=0, atol=0)
    ex = ptc.explain(f, backend="ptc")(a.clone().requires_grad_(), b.clone().requires_grad_())
    assert not ex.autograd_fallback
    a[0, 0] = 0.5  # finite differences need a point away from x = 0
    assert torch.autograd.gradcheck(compiled, (a.clone().requires_grad_(),
                                               b.clone().requires_grad_()), eps=1e-6, atol=1e-6)
