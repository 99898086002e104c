"""The scatter family traces into one graph (issue 13): scatter,
scatter_add, scatter_reduce ("sum", "mean"), index_add, index_copy,
index_fill and masked_scatter, as functions, methods and in-place methods.
Each was a graph break (PTC-B007) before. Compiled by ptc (the scatter runs
as ptc's C kernel on the CPU) and compared with eager: values, the input
written in place, gradients against torch autograd, eager's errors for an
index out of range. What ptc does not trace (scatter_reduce's amax, amin and
prod, scatter's reduce="multiply") breaks with its reason and gives eager's
values.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from like_eager import assert_breaks_like_eager, outcome  # noqa: E402


def operands():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g)
    # along dim 0: two rows name row 1, so scatter's later write wins
    index = torch.tensor([[0, 1, 2, 3, 1, 0], [1, 3, 0, 1, 2, 2]])
    src = torch.randn(3, 6, generator=g)  # larger than index: its first rows are read
    return x, index, src


CASES = {
    "scatter": lambda x, i, s: torch.scatter(x, 0, i, s) * 2,
    "scatter_method_dim1": lambda x, i, s: x.scatter(1, i[:, :4] % 6, s[:2, :4]),
    "scatter_value": lambda x, i, s: x.scatter(0, i, 1.5) + 1,
    "scatter_value_keyword": lambda x, i, s: torch.scatter(x, 0, i, value=-2),
    "scatter_reduce_add": lambda x, i, s: x.scatter(0, i, s, reduce="add"),
    "scatter_value_reduce_add": lambda x, i, s: x.scatter(0, i, 2.5, reduce="add"),
    "scatter_int32_index": lambda x, i, s: x.scatter(0, i.int(), s),
    "scatter_add": lambda x, i, s: torch.scatter_add(x, 0, i, s) + 1,
    "scatter_add_integers": lambda x, i, s: (x * 10).long().scatter_add(0, i, (s * 10).long()),
    "scatter_reduce_sum": lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
    "scatter_reduce_sum_without_self": lambda x, i, s: torch.scatter_reduce(
        x, 0, i, s, "sum", include_self=False),
    "scatter_reduce_mean": lambda x, i, s: x.scatter_reduce(0, i, s, "mean"),
    "scatter_reduce_mean_without_self": lambda x, i, s: x.scatter_reduce(
        0, i, s, reduce="mean", include_self=False),
    "scatter_reduce_mean_integers": lambda x, i, s: (x * 10).long().scatter_reduce(
        0, i, (s * 10).long(), "mean"),
    "index_add": lambda x, i, s: torch.index_add(x, 0, torch.tensor([3, 1, 3]), s),
    "index_add_alpha": lambda x, i, s: x.index_add(1, torch.tensor([5, 0]), s[:, :2].repeat(
        2, 1)[:4], alpha=-0.5),
    "index_add_int32_index": lambda x, i, s: x.index_add(0, torch.tensor([2, 0, 1]).int(), s),
    "index_copy": lambda x, i, s: torch.index_copy(x, 0, torch.tensor([3, 0, 1]), s),
    "index_copy_dim1": lambda x, i, s: x.index_copy(1, torch.tensor([4, 2]), s.t()[:2].t()
                                                    .repeat(2, 1)[:4]),
    "index_fill": lambda x, i, s: torch.index_fill(x, 1, torch.tensor([0, -1, 2]), 7.0),
    "index_fill_tensor_value": lambda x, i, s: x.index_fill(0, torch.tensor([1]), s[0, 0]),
    "index_fill_integers": lambda x, i, s: x.long().index_fill(0, torch.tensor([2, 3]), -3),
    "masked_scatter": lambda x, i, s: x.masked_scatter(x > 0.2, torch.arange(30.0)),
    "masked_scatter_broadcast_mask": lambda x, i, s: torch.masked_scatter(
        x, torch.tensor([True, False, True, False, False, True]), s.flatten().repeat(2)),
}


@pytest.mark.parametrize("name", CASES)
def test_one_graph_with_eager_values(name):
    fn, (x, i, s) = CASES[name], operands()
    got = ptc.compile(fn, fullgraph=True)(x, i, s)
    torch.testing.assert_close(got, fn(x, i, s), rtol=1e-6, atol=1e-6)


INPLACE = {
    "scatter_": lambda x, i, s: x.scatter_(0, i, s),
    "scatter_value_": lambda x, i, s: x.scatter_(1, i[:, :3], 4.0),
    "scatter_add_": lambda x, i, s: x.scatter_add_(0, i, s),
    "scatter_reduce_": lambda x, i, s: x.scatter_reduce_(0, i, s, "mean", include_self=False),
    "index_add_": lambda x, i, s: x.index_add_(0, torch.tensor([0, 0, 2]), s, alpha=3),
    "index_copy_": lambda x, i, s: x.index_copy_(0, torch.tensor([2, 1, 0]), s),
    "index_fill_": lambda x, i, s: x.index_fill_(1, torch.tensor([5]), 0.5),
    "masked_scatter_": lambda x, i, s: x.masked_scatter_(x < 0, s.flatten().repeat(2)),
}


@pytest.mark.parametrize("name", INPLACE)
def test_in_place_forms_write_the_input(name):
    fn, (x, i, s) = INPLACE[name], operands()
    wx, cx = x.clone(), x.clone()
    want, got = fn(wx, i, s), ptc.compile(fn, fullgraph=True)(cx, i, s)
    assert got is cx
    torch.testing.assert_close(cx, wx, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_a_view_written_in_place_reaches_its_base():
    def f(x, i, s):
        x[1:].scatter_add_(0, i[:, :3] % 3, s[:, :3])
        return x.sum()

    x, i, s = operands()
    wx, cx = x.clone()[:, :3].contiguous(), x.clone()[:, :3].contiguous()
    torch.testing.assert_close(ptc.compile(f, fullgraph=True)(cx, i, s), f(wx, i, s))
    torch.testing.assert_close(cx, wx)


GRADIENTS = {
    "scatter": lambda x, s, i: torch.scatter(x, 0, i, s[:2]),
    "scatter_value": lambda x, s, i: x.scatter(0, i, 2.0) * x,
    "scatter_add": lambda x, s, i: x.scatter_add(0, i, s[:2]),  # torch: src of index's shape
    "scatter_reduce_mean": lambda x, s, i: x.scatter_reduce(0, i, s[:2], "mean",
                                                            include_self=False),
    "index_add": lambda x, s, i: x.index_add(0, torch.tensor([3, 1, 3]), s, alpha=2.0),
    "index_copy": lambda x, s, i: x.index_copy(0, torch.tensor([3, 0, 1]), s),
    "index_fill": lambda x, s, i: x.index_fill(1, torch.tensor([1, 4]), 0.0),
    "masked_scatter": lambda x, s, i: x.masked_scatter(x > 0, s.flatten().repeat(2)),
}


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradients_like_autograd(name):
    fn, (x, i, s) = GRADIENTS[name], operands()
    w = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))  # weights the outputs
    grads = []
    for f in (fn, ptc.compile(fn, fullgraph=True)):
        xs, ss = x.clone().requires_grad_(), s.clone().requires_grad_()
        grads.append(torch.autograd.grad((f(xs, ss, i) * w).sum(), (xs, ss), allow_unused=True))
    for got, want in zip(grads[1], grads[0]):
        if want is None:  # src unused (a value scatter, index_fill): none or zeros
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want)


def test_scatter_gradient_against_finite_differences():
    x, i, s = operands()
    fn = ptc.compile(lambda x, s: torch.scatter(x, 0, i, s[:2]).sin().sum())
    xd, sd = x.double().requires_grad_(), s.double().requires_grad_()
    assert torch.autograd.gradcheck(fn, (xd, sd))


# (name, function): each raises in eager for operands() (an index out of range)
FAILING = {
    "scatter_high": lambda x, i, s: x.scatter(0, i + 3, s),
    "scatter_negative": lambda x, i, s: x.scatter(1, -1 - i, s),
    "scatter_value_high": lambda x, i, s: x.scatter(0, i * 3, 1.0),
    "scatter_add_high": lambda x, i, s: x.scatter_add(0, i * 2, s) + 1,
    "scatter_reduce_negative": lambda x, i, s: x.scatter_reduce(0, i - 1, s, "sum"),
    "index_add_high": lambda x, i, s: x.index_add(0, torch.tensor([0, 4, 1]), s),
    "index_copy_negative": lambda x, i, s: x.index_copy(0, torch.tensor([0, -1, 1]), s),
    "index_fill_low": lambda x, i, s: x.index_fill(0, torch.tensor([-5]), 1.0),
    "masked_scatter_short_source": lambda x, i, s: x.masked_scatter(x > -9, s.flatten()),
}


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("name", FAILING)
def test_errors_like_eager(name, fullgraph):
    """On the CPU the scatter's C kernel fails the call as a kernel's index
    check does, and the graph's segment runs again eagerly for eager's
    exception (on CUDA the scatter is torch's, and so its device assert)."""
    fn, args = FAILING[name], operands()
    want = outcome(fn, args)
    assert want[0] in (RuntimeError, IndexError), want
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager may hide the error
        assert outcome(ptc.compile(fn, fullgraph=fullgraph), args) == want


@pytest.mark.parametrize("fn,reason", [
    (lambda x, i, s: x.scatter_reduce(0, i, s, "amax") + 1, "reduce 'amax'"),
    (lambda x, i, s: x.scatter(0, i, s, reduce="multiply") + 1, "reduce other than 'add'"),
    (lambda x, i, s: x.index_copy(0, torch.tensor([0, 1, 2]).int(), s) + 1, "eager refuses"),
])
def test_what_is_not_traced_breaks_with_its_reason(fn, reason):
    assert_breaks_like_eager(fn, operands(), reason, torch.testing.assert_close)
