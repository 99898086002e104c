"""The compiled backward of softmax, log_softmax, logsumexp and cross_entropy.

Their prims subtract the max for range only; torch's derivatives treat it as a
constant, and so does ptc's (prims.stop_gradient): the backward is torch's
formula, y (g - sum(g y)) and g - exp(y) sum(g), with no pass for amax's
gradient (an eq against the max, which sums to zero) and one full-size tensor
saved, as torch saves y, or the smaller input it recomputes y from. Gradients
are checked against torch autograd, and in float64 against finite differences,
at ties in the max, -inf entries (masked attention) and large magnitudes."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import ptc  # noqa: E402
from ptc._autograd import saved_values  # noqa: E402
from test_training import compiled_autograd  # noqa: E402,F401


FNS = {
    "softmax": lambda x, dim: F.softmax(x, dim),
    "log_softmax": lambda x, dim: F.log_softmax(x, dim),
    "logsumexp": lambda x, dim: torch.logsumexp(x, dim),
    "logsumexp_keepdim": lambda x, dim: torch.logsumexp(x, (dim,), keepdim=True),
}


def weighted(fn, dim, finite=False):
    """fn's output weighed by a fixed random tangent, so every output element
    carries its own gradient (a plain sum of softmax has gradient zero);
    finite: its -inf elements (log_softmax of -inf) left out."""
    def f(x, w):
        y = fn(x, dim)
        return (torch.where(torch.isinf(y), torch.zeros_like(y), y * w) if finite else y * w).sum()
    return f


def grads(f, x, *rest, compiled):
    x = x.detach().clone().requires_grad_()
    out = (ptc.compile(f, fullgraph=True) if compiled else f)(x, *rest)
    if compiled:  # ptc's backward, not eager's after a fallback
        assert type(out.grad_fn).__name__ == "CompiledFunctionBackward", out.grad_fn
    out.backward()
    return out.detach(), x.grad


def tangent(fn, x, dim):
    shape = fn(x.detach().double(), dim).shape
    return torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def special(kind, shape, dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if kind == "ties":  # the max taken twice or more in every row and column
        x = x.round()
        x[..., :2] = 3
        x[:2] = 3
    elif kind == "masked":  # -inf entries, never a whole row or column
        mask = torch.rand(shape, generator=gen) < 0.4
        mask[..., 0] = False
        mask[0] = False
        x = x.masked_fill(mask, float("-inf"))
    elif kind == "large":
        x = x * 1e4 + 3e4
    return x.to(dtype)


@pytest.mark.parametrize("name", sorted(FNS))
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", ["plain", "ties", "masked", "large"])
def test_float32_gradients_equal_torch(name, dim, kind):
    fn = FNS[name]
    x = special(kind, (5, 7), torch.float32)
    w = tangent(fn, x, dim).float()
    f = weighted(fn, dim, finite=kind == "masked")
    got, gx = grads(f, x, w, compiled=True)
    want, wx = grads(f, x, w, compiled=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * max(1.0, want.abs().item()))
    torch.testing.assert_close(gx, wx, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(FNS))
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", ["plain", "ties"])
def test_float64_gradients_equal_finite_differences(name, dim, kind):
    fn = FNS[name]
    x = special(kind, (3, 4), torch.float64).requires_grad_()
    w = tangent(fn, x, dim)
    f = ptc.compile(weighted(fn, dim), fullgraph=True)
    assert type(f(x, w).grad_fn).__name__ == "CompiledFunctionBackward"
    assert torch.autograd.gradcheck(lambda t: f(t, w), (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(FNS))
@pytest.mark.parametrize("dim", [0, -1])
def test_bfloat16_gradients_equal_torch(name, dim):
    fn = FNS[name]
    x = special("plain", (6, 33), torch.bfloat16) * 4
    w = tangent(fn, x, dim).to(torch.bfloat16)
    f = weighted(fn, dim)
    got, gx = grads(f, x, w, compiled=True)
    want, wx = grads(f, x, w, compiled=False)
    assert gx.dtype == wx.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(gx.float(), wx.float(), rtol=2e-2, atol=1e-2)


def test_dtype_argument_and_a_0_dim_input():
    x = special("plain", (4, 9), torch.bfloat16)
    w = tangent(FNS["softmax"], x, 1).float()

    def f(x, w):
        return (F.softmax(x, 1, dtype=torch.float32) * w).sum() + F.log_softmax(x[0, 0], 0)

    got, gx = grads(f, x, w, compiled=True)
    want, wx = grads(f, x, w, compiled=False)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gx.float(), wx.float(), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("targets", ["classes", "probabilities", "ignored"])
def test_cross_entropy_gradients_equal_torch(targets):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(8, 11, generator=gen) * 5
    x[:, 3] = x[:, 2]  # a tie in the max of some rows
    if targets == "probabilities":
        y = torch.rand(8, 11, generator=gen).softmax(1)
    else:
        y = torch.randint(0, 11, (8,), generator=gen)
        y[::3] = 3
    kw = {"ignore_index": 3} if targets == "ignored" else {}

    def f(x, y):
        return F.cross_entropy(x, y, **kw)

    got, gx = grads(f, x, y, compiled=True)
    want, wx = grads(f, x, y, compiled=False)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gx, wx)


def test_a_fully_masked_logsumexp_row_is_eagers_nan():
    x = special("plain", (3, 5), torch.float32)
    x[1] = float("-inf")
    f = weighted(FNS["logsumexp"], 1)
    w = torch.ones(3)
    got, gx = grads(f, x, w, compiled=True)
    want, wx = grads(f, x, w, compiled=False)
    torch.testing.assert_close(gx, wx, equal_nan=True)


# ---- what the backward is ------------------------------------------------------------------


def trace_text(tmp_path, stage):
    return "".join(p.read_text() for p in tmp_path.rglob(f"{stage}.ptir"))


def saved_bytes(out, *inputs):
    """Bytes the forward kept for the backward, the graph's inputs (saved as
    they are, no copy) left out."""
    given = {t.data_ptr() for t in inputs}
    return sum(t.numel() * t.element_size() for t in saved_values(out.grad_fn)
               if t.data_ptr() not in given)


def compiled_with_trace(f, tmp_path, *args):
    ptc.config.trace_dir = str(tmp_path)
    try:
        return ptc.compile(f, fullgraph=True)(*args)
    finally:
        ptc.config.trace_dir = None


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_no_pass_for_the_max_and_one_tensor_saved(name, tmp_path):
    rows, cols = 64, 500
    x = torch.randn(rows, cols).requires_grad_()
    w = tangent(FNS[name], x, -1).float()
    out = compiled_with_trace(weighted(FNS[name], -1), tmp_path, x, w)
    forward, backward = trace_text(tmp_path, "forward"), trace_text(tmp_path, "backward")
    assert backward, "no backward.ptir in the trace"
    # main: prims.eq(x, max) over the whole input, saved as a bool mask for
    # the backward to share out the max's gradient (zero in total)
    whole = [line for line in (forward + backward).splitlines()
             if f"[{rows},{cols}]" in line and ("prims.eq(" in line or "prims.where(" in line)]
    assert not whole, forward + backward
    assert "prims.amax(" not in backward, backward
    # one full-size tensor (y, or exp(x - max)) and row statistics, as torch saves y
    assert saved_bytes(out, x, w) <= rows * cols * 4 + 4 * rows * 4, (
        [(t.shape, t.dtype) for t in saved_values(out.grad_fn)])


def test_a_bfloat16_input_is_saved_not_its_float32_softmax(tmp_path):
    """Attention's softmax under autocast runs in float32 on bfloat16 scores:
    what is saved is the scores (half of torch's float32 y) and the row
    statistics, from which the backward recomputes y."""
    rows, cols = 64, 500
    x = torch.randn(rows, cols).to(torch.bfloat16).requires_grad_()
    w = torch.randn(rows, cols)

    def f(x, w):
        return (F.softmax(x.float(), -1) * w).sum()

    out = compiled_with_trace(f, tmp_path, x, w)
    saved = [(t.shape, t.dtype) for t in saved_values(out.grad_fn)]
    assert x.data_ptr() in {t.data_ptr() for t in saved_values(out.grad_fn)}, saved
    assert saved_bytes(out, x, w) <= 4 * rows * 4, saved


# ---- the gradient of a pick of one element per row ---------------------------------------


def test_cross_entropys_backward_scatters_nothing(tmp_path):
    """nll_loss picks one log-probability per row (a gather); its gradient is
    where(column == target, g, 0), which fuses into log_softmax's backward,
    not a scatter into a dense zero tensor (an extern: GPT-2's 411 MB float32
    [2048, 50257] written, then read twice)."""
    x = torch.randn(64, 500).requires_grad_()
    y = torch.randint(0, 500, (64,))
    out = compiled_with_trace(lambda x, y: F.cross_entropy(x, y), tmp_path, x, y)
    backward = trace_text(tmp_path, "backward")
    assert backward and "prims.scatter_add(" not in backward, backward
    out.backward()
    want = x.detach().clone().requires_grad_()
    F.cross_entropy(want, y).backward()
    torch.testing.assert_close(x.grad, want.grad)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("per_row", [1, 3])
def test_gather_gradients_equal_torch(dim, per_row):
    """One element per row takes the one-hot form, several (repeats included)
    the scatter."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(6, 7, 5, dtype=torch.float64, generator=gen)
    shape = list(x.shape)
    shape[dim] = per_row
    index = torch.randint(0, x.shape[dim], shape, generator=gen)
    w = torch.randn(shape, dtype=torch.float64, generator=gen)

    def f(x, index, w):
        return (torch.gather(x, dim, index) * w).sum()

    got, gx = grads(f, x, index, w, compiled=True)
    want, wx = grads(f, x, index, w, compiled=False)
    torch.testing.assert_close(gx, wx)
