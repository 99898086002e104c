"""fmod: C's fmod, the result has the sign of the dividend (remainder's has
the divisor's), exact in every float dtype; on integers the truncating
remainder, a zero divisor raising as eager's. A prim of its own (pointwise.def:
prims.fmod, emitted as the target's fmod, the one remainder is built on) with
its derivative d_fmod: d/da = 1, d/db = -trunc(a / b)."""
import math
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402

INF, NAN = math.inf, math.nan


def operands(dtype):
    g = torch.Generator().manual_seed(21)
    a = torch.randn(4, 33, generator=g, dtype=torch.float64) * 20
    b = torch.randn(4, 33, generator=g, dtype=torch.float64) * 4
    a[0, :12] = torch.tensor([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 3.0, INF, 5.0, NAN, 1e30, -1e30],
                             dtype=torch.float64)
    b[0, :12] = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 2.0, INF, 2.0, 3.7, 0.1],
                             dtype=torch.float64)
    if dtype in (torch.float16, torch.bfloat16):
        a[0, 10:12] = torch.tensor([6e4, -3e4], dtype=torch.float64)
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=str)
def test_fmod_matches_eager_exactly(dtype):
    a, b = operands(dtype)

    def f(x, y):
        return torch.fmod(x, y), x.fmod(y[1]), torch.fmod(x, 2.5), x.clone().fmod_(-3)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns: not here
        got = ptc.compile(f, fullgraph=True)(a, b)
    for g, w in zip(got, f(a, b)):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(torch.signbit(g[~g.isnan()]), torch.signbit(w[~w.isnan()]))
    # the dividend's sign, where remainder takes the divisor's
    assert got[0][0, :4].tolist() == [1.5, -1.5, 1.5, -1.5]
    assert torch.remainder(a, b)[0, :4].tolist() == [1.5, 0.5, -0.5, -1.5]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8], ids=str)
def test_fmod_of_integers_truncates_as_eager(dtype):
    info = torch.iinfo(dtype)
    a = torch.tensor([7, -7, 7, -7, 0, info.min, info.max, 5], dtype=torch.int64).to(dtype)
    b = torch.tensor([2, 2, -2, -2, 3, -1, 7, 5], dtype=torch.int64).to(dtype)

    def f(x, y):
        return torch.fmod(x, y), x.fmod(3), torch.fmod(x, 2.5)

    got = ptc.compile(f, fullgraph=True)(a, b)
    for g, w in zip(got, f(a, b)):
        assert g.dtype == w.dtype
        assert torch.equal(g, w), (g, w)


def test_fmod_of_an_integer_zero_divisor_raises_as_eager():
    a, b = torch.tensor([3, 4]), torch.tensor([1, 0])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.fmod(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        ptc.compile(lambda x, y: torch.fmod(x, y), fullgraph=True)(a, b)


def test_fmod_of_bools_raises_as_eager():
    x = torch.tensor([True, False])
    with pytest.raises(NotImplementedError):
        torch.fmod(x, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError):
            ptc.compile(lambda t: torch.fmod(t, t))(x)


@pytest.fixture
def compiled_autograd():
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = False


def test_fmod_gradient_matches_eager_and_finite_differences(compiled_autograd):
    g = torch.Generator().manual_seed(4)
    a = torch.randn(3, 7, generator=g, dtype=torch.float64) * 10
    b = torch.rand(3, 7, generator=g, dtype=torch.float64) * 3 + 0.5
    b[1] = -b[1]
    # finite differences need points away from fmod's jumps (a / b an integer)
    a = torch.where((a / b - torch.round(a / b)).abs() < 0.05, a + 0.3 * b, a)

    def f(x, y):
        return torch.fmod(x * 1.0, y) * torch.arange(7.0, dtype=torch.float64)

    compiled = ptc.compile(f, fullgraph=True)
    ae, be = a.clone().requires_grad_(), b.clone().requires_grad_()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    f(ae, be).sum().backward()
    compiled(ac, bc).sum().backward()
    k = torch.arange(7.0, dtype=torch.float64)
    torch.testing.assert_close(ac.grad, ae.grad, rtol=0, atol=0)
    torch.testing.assert_close(bc.grad, be.grad, rtol=1e-12, atol=0)
    torch.testing.assert_close(ac.grad, k.expand(3, 7), rtol=0, atol=0)  # d/da = 1
    torch.testing.assert_close(bc.grad, -torch.trunc(a / b) * k, rtol=1e-12, atol=0)
    ex = ptc.explain(f, backend="ptc")(a.clone().requires_grad_(), b.clone().requires_grad_())
    assert not ex.autograd_fallback
    assert torch.autograd.gradcheck(compiled, (a.clone().requires_grad_(),
                                               b.clone().requires_grad_()), eps=1e-6, atol=1e-6)
