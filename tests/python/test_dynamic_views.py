"""Outputs that are views with symbolic sizes alias their base, as eager's
do: under dynamic shapes the compiled function returns x.view(n, -1, 4) of
its input as a view of that input (a write through it is seen in x), for
every size one symbolic entry serves. On main such views came back as
copies (writes through them were lost)."""
import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


@pytest.fixture(autouse=True)
def _reset():
    ptc.reset()


def ncompiles(c):
    handle = getattr(c, "_ptc_compiled", c)
    return sum(e["kind"] == "compile" for e in handle._events())


def rows_of_four(x):
    return x.view(x.size(0), -1, 4)


def last_half_transposed(x):
    return x[:, x.size(1) // 2:].t(), x.sum()


def split_heads(x, w):
    h = x @ w  # an output of the graph, and two views of it
    B, L, _ = h.shape
    return h, h.view(B, L, 2, -1).transpose(1, 2)


@pytest.mark.parametrize("dynamic", [None, True])
def test_view_of_an_input_aliases_it(dynamic):
    c = ptc.compile(rows_of_four, dynamic=dynamic)
    for n in (3, 5, 9):
        x = torch.randn(n, 8)
        out = c(x)
        assert out.shape == (n, 2, 4)
        assert out._base is x or out.data_ptr() == x.data_ptr()
        out.add_(1)  # eager: x sees the write
        want = torch.zeros(n, 8)
        want.copy_(x)
        assert torch.equal(x, want)
        x2 = torch.randn(n, 8)
        ref = x2.clone()
        c(x2).mul_(0)
        assert torch.equal(x2, torch.zeros_like(ref))
    assert ncompiles(c) <= 2


def test_slice_view_of_an_input_with_symbolic_bounds():
    c = ptc.compile(last_half_transposed, dynamic=True)
    for n in (4, 6, 10):
        x = torch.randn(3, n)
        v, s = c(x)
        want_v, want_s = last_half_transposed(x)
        torch.testing.assert_close(v, want_v)
        torch.testing.assert_close(s, want_s)
        assert v.stride() == want_v.stride()
        assert v.data_ptr() == want_v.data_ptr()  # the same memory of x as eager's view
    assert ncompiles(c) == 1


def test_view_of_a_returned_output_shares_its_memory():
    w = torch.randn(6, 8)
    c = ptc.compile(split_heads)
    for L in (3, 7):
        x = torch.randn(2, L, 6)
        ptc.mark_dynamic(x, 1)
        h, heads = c(x, w)
        want_h, want_heads = split_heads(x, w)
        torch.testing.assert_close(heads, want_heads, rtol=1e-4, atol=1e-4)
        assert heads.data_ptr() == h.data_ptr() and heads.stride() == want_heads.stride()
    assert ncompiles(c) == 1
