"""A compiled forward's saved values sit in a few blocks, not a tensor each
(compiler/capture/backend/saved_blocks.c)."""
import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from ptc._autograd import saved_values  # noqa: E402


def mlp(x, ws):
    for w in ws:
        x = torch.tanh(x @ w) * torch.sigmoid(x @ w)
    return x


def weights(n=6, width=32):
    torch.manual_seed(0)
    return [(torch.randn(width, width) / 6).requires_grad_() for _ in range(n)]


def grads_of(f, x, ws, **backward):
    for w in ws:
        w.grad = None
    out = f(x, ws).sum()
    out.backward(**backward)
    return [w.grad.clone() for w in ws]


def test_saved_values_come_in_a_few_blocks_and_gradients_are_eagers():
    x, ws = torch.randn(16, 32), weights()
    compiled = ptc.compile(mlp)
    out = compiled(x, ws)
    node = out.grad_fn
    placed = [e for e in node.layout.entries if e is not None]
    assert len(placed) >= len(ws) and 1 < node.layout.nblocks <= 8, node.layout.entries
    # the saved inputs (the ws) as they are, then the blocks
    assert len(node.saved_tensors) == node.layout.entries.count(None) + node.layout.nblocks
    values = saved_values(node)
    assert len(values) == len(node.layout.entries)
    out.sum().backward()
    got = [w.grad.clone() for w in ws]
    assert all(torch.allclose(g, r, rtol=1e-4, atol=1e-5) for g, r in zip(got, grads_of(mlp, x, ws)))


def test_a_step_allocates_a_few_tensors_not_one_per_saved_value():
    from torch.profiler import ProfilerActivity, profile
    x, ws = torch.randn(16, 32), weights(24)
    compiled = ptc.compile(mlp)
    compiled(x, ws).sum().backward()  # compiles
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = compiled(x, ws)
    made = sum(e.count for e in prof.key_averages()
               if e.key in ("aten::empty", "aten::new_empty"))
    saved = sum(e is not None for e in out.grad_fn.layout.entries)
    assert saved >= 24
    # the output, at most 8 blocks and few others (before: one per saved value)
    assert made < saved // 2, (made, saved)


def test_retain_graph_keeps_the_blocks_for_a_second_backward():
    x, ws = torch.randn(16, 32), weights()
    want = grads_of(mlp, x, ws)
    out = ptc.compile(mlp)(x, ws).sum()
    for w in ws:
        w.grad = None
    out.backward(retain_graph=True)
    out.backward()
    for w, g in zip(ws, want):
        torch.testing.assert_close(w.grad, 2 * g, rtol=1e-4, atol=1e-5)


def test_a_second_backward_without_retain_graph_raises_torchs_error():
    x, ws = torch.randn(16, 32), weights()
    out = ptc.compile(mlp)(x, ws).sum()
    out.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()


def broken(x, ws):
    h = mlp(x, ws[:3])
    print("a break")  # a graph break: two compiled nodes
    return mlp(h, ws[3:])


def test_a_graph_with_a_break_places_each_nodes_saved_values():
    x, ws = torch.randn(16, 32), weights()
    want = grads_of(broken, x, ws)
    got = grads_of(ptc.compile(broken), x, ws)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_dynamic_sizes_place_each_runs_values_at_its_sizes():
    ws = weights()
    compiled = ptc.compile(mlp, dynamic=True)
    for rows in (8, 24, 5):
        x = torch.randn(rows, 32)
        want = grads_of(mlp, x, ws)
        got = grads_of(compiled, x, ws)
        for g, r in zip(got, want):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def attention_first(q, k, v, w):
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return (torch.tanh(a.sin() * w) * a).sum()


def test_an_extern_result_made_before_the_first_allocation_stays_its_own_tensor():
    """The attention's result is an extern's, handed over as the first saved
    value before the run allocates anything: the blocks were planned with it
    and the backward read it from a block it never went to ("expected dtype
    f32, got bool"; a GPT-2 block under DDP, test_distributed_gpt2)."""
    torch.manual_seed(0)
    ts = [torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(4)]
    want = attention_first(*ts)
    want.backward()
    expected = [t.grad.clone() for t in ts]
    for t in ts:
        t.grad = None
    got = ptc.compile(attention_first)(*ts)
    got.backward()
    assert torch.allclose(got, want, atol=1e-5)
    for t, e in zip(ts, expected):
        assert torch.allclose(t.grad, e, atol=1e-4)


def test_a_saved_value_that_is_also_an_output_is_a_tensor_of_its_own():
    """cumprod's forward returns its result as the output and as a saved
    value: the run makes that one output, never placing the saved one, which
    then is a tensor of its own, and the layout lists only blocks that were
    made (the backward read a block that was not there: a segfault)."""
    ptc.config.compiled_autograd = True
    try:
        x = (torch.rand(3, 6, dtype=torch.float64) + 0.5).requires_grad_()
        x.data[1, 2] = 0.0
        y = x.detach().clone().requires_grad_()
        f = lambda t: torch.cumprod(t * 1.0, 1)  # noqa: E731
        out = ptc.compile(f, fullgraph=True)(x)
        layout = out.grad_fn.layout
        assert all(e is None or e[0] < layout.nblocks for e in layout.entries), layout.entries
        assert layout.entries.count(None) + layout.nblocks == len(out.grad_fn.saved_tensors)
        out.sum().backward()
        f(y).sum().backward()
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-12, atol=1e-12)
    finally:
        ptc.config.compiled_autograd = False
