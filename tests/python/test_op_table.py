"""Ops added through the op table (compiler/ops/ops.def + pointwise.def): one
row each, plus the functions it names. logit is the walk-through: its
captured graph holds one logit node, compiled results match eager torch in
every float dtype, with and without eps, and its gradient (through its prims)
matches eager's and central finite differences. frac is the experiment of
issue 14 (a pointwise op built from prims that exist): ops.def and
pointwise.def rows, its decomposition pw_frac and its reference test."""
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
