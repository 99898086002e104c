"""torch.compile(backend="ptc") with Dynamo's symbolic sizes (issue 18): a
graph Dynamo traced with SymInt sizes (dynamic=True, or its automatic
dynamic after a size change) is compiled by ptc once, symbolically, and
serves every later size -- it neither fails nor recompiles per size."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch._dynamo", reason="torch.compile needs torch 2")

import ptc  # noqa: E402
import ptc._dynamo  # noqa: E402


class Attention(torch.nn.Module):
    """Sizes flow from the input through view/reshape/transpose, as in a transformer."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return torch.nn.functional.gelu(self.out(y)) + x


def counting_backend():
    graphs = []

    def backend(gm, example_inputs):
        fn = ptc._dynamo.ptc_backend(gm, example_inputs)
        graphs.append(fn)
        return fn
    return backend, graphs


def ptc_compiles(fn):
    compiled = getattr(fn, "ptc_compiled", fn)
    return [e for e in compiled._events() if e["kind"] == "compile"]


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_dynamic_true_compiles_once_for_every_size():
    torch.manual_seed(0)
    model = Attention().eval()
    backend, graphs = counting_backend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for b, t in ((2, 5), (3, 7), (2, 9), (4, 6)):
            x = torch.randn(b, t, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
            assert not hasattr(x, "_dynamo_dynamic_indices")  # the user's tensor is left as it was
    assert len(graphs) == 1, "Dynamo compiled %d graphs" % len(graphs)
    (fn,) = graphs
    events = ptc_compiles(fn)
    assert len(events) == 1, [e["reason"] for e in events]
    assert fn.ptc_source.count(".size(") == 2, fn.ptc_source  # b and t, read from the input
    assert any("s0 from L['a0'].size(0)" in g for g in events[0]["guards"]), events[0]["guards"]


def test_automatic_dynamic_after_a_size_change():
    """dynamic=None: Dynamo's first graph is static, its recompile after a size
    change is symbolic; ptc compiles each once and later sizes reuse the second."""
    torch.manual_seed(0)
    model = Attention().eval()
    backend, graphs = counting_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for t in (5, 7, 9, 11, 7):
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert len(graphs) == 2, "Dynamo compiled %d graphs" % len(graphs)
    static, symbolic = graphs
    assert not hasattr(static, "ptc_source")  # no symbolic input: ptc compiles the FX forward as it is
    assert [len(ptc_compiles(g)) for g in graphs] == [1, 1]


def test_a_dynamic_int_argument_reaches_ptc_as_a_size():
    """An int Dynamo made symbolic (no tensor has it as a size) is carried as
    the size of a zero-byte tensor, so a tensor sized by it stays symbolic."""
    def f(x, n):
        return torch.arange(n, dtype=torch.float32) * 2 + x.sum()

    backend, graphs = counting_backend()
    compiled = torch.compile(f, backend=backend, dynamic=True)
    for n in (2, 3, 4, 6):
        x = torch.randn(12)
        torch.testing.assert_close(compiled(x, n), f(x, n))
    assert len(graphs) == 1
    (fn,) = graphs
    assert "c0.size(1)" in fn.ptc_source, fn.ptc_source
    assert len(ptc_compiles(fn)) == 1, [e["reason"] for e in ptc_compiles(fn)]


def test_gradients_through_a_symbolic_graph():
    torch.manual_seed(0)
    model = Attention()
    backend, graphs = counting_backend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for t in (5, 8):
        x = torch.randn(2, t, 16, requires_grad=True)
        compiled(x).square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        model.zero_grad()
        x.grad = None
        model(x).square().sum().backward()
        want = [p.grad for p in model.parameters()] + [x.grad]
        model.zero_grad()
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert len(graphs) == 1 and len(ptc_compiles(graphs[0])) == 1


def test_a_size_times_a_tensor_specialises_instead_of_breaking():
    """Dynamo's FX code multiplies tensors by SymInt inputs (sum * s0): ptc
    specialises the size there (a guard, noted) rather than breaking the graph."""
    def f(x):
        return x.sum(-1) * x.shape[0]

    compiled = ptc.compile(f, dynamic=True)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), f(x))
    events = ptc.ExplainOutput(compiled._events(), None)
    assert events.graph_count == 1 and events.break_count == 0, str(events)
