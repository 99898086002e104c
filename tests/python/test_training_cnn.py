"""CNN training under ptc.compile: graph inputs written in place (a buffer's
add_, BatchNorm's running statistics and num_batches_tracked) are outputs of
one functional graph, copied into the caller's tensors after the call (or
written into them by the compiled forward's kernels, lower/inplace.c), so a
BatchNorm in train mode is no graph break; its backward with batch
statistics, the convolution's gradients through torch's
convolution_backward, and whole training runs of resnet18 are compared with
eager from the same seed."""
import copy

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


@pytest.fixture(autouse=True)
def compiled_autograd():
    old = ptc.config.compiled_autograd
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = old


def close(a, b, tol):
    scale = max(b.abs().max().item(), 1e-6)
    return (a - b).abs().max().item() <= tol * scale


def explain(fn, *args):
    return ptc.explain(fn, backend="ptc")(*args)


def no_b012(ex):
    return not any(b.get("code") == "PTC-B012" for b in ex.breaks)


# ---- in-place writes of module buffers ----------------------------------------------------


class Counter(torch.nn.Module):
    """Reads a buffer, writes it twice, reads it again."""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.arange(5.0))
        self.register_buffer("count", torch.tensor(0))

    def forward(self, x):
        before = x * self.buf
        self.buf.add_(1)
        self.buf.mul_(2)
        self.count.add_(1)
        return before + self.buf * self.count


def test_buffer_writes_are_written_back_in_eager_order():
    eager = Counter()
    comp = copy.deepcopy(eager)
    cf = ptc.compile(comp)
    x = torch.randn(5)
    for _ in range(3):
        assert torch.equal(cf(x), eager(x))
        assert torch.equal(comp.buf, eager.buf) and torch.equal(comp.count, eager.count)
    ex = explain(comp, x)
    assert (ex.graph_count, ex.break_count) == (1, 0)


def test_written_buffer_returned_is_the_modules_tensor():
    class Bump(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.zeros(3))

        def forward(self):
            self.buf.add_(3)
            return self.buf

    m = Bump()
    out = ptc.compile(m)()
    assert out is m.buf and torch.equal(m.buf, torch.full((3,), 3.0))


def test_buffer_write_then_break_is_seen_after_the_graph():
    class Steps(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.tensor(0))

        def forward(self, x):
            self.steps.add_(1)
            y = x.sin()
            seen.append(int(self.steps))  # a break: the write is already in the buffer
            return y * self.steps

    seen = []
    m = Steps()
    cf = ptc.compile(m)
    x = torch.randn(4)
    for step in (1, 2):
        assert torch.allclose(cf(x), x.sin() * step)
    assert seen == [1, 2] and m.steps.item() == 2


def test_argument_written_in_place_is_still_a_break():
    # v may be a view of x: writing it back after the graph would be too late
    def f(x, v):
        v.add_(1)
        return x.sum()

    a, b = torch.zeros(3, 4), torch.zeros(3, 4)
    assert ptc.compile(f)(a, a[0]).item() == f(b, b[0]).item() == 4.0
    assert any(br.get("code") == "PTC-B012" for br in explain(f, a, a[0]).breaks)


# ---- BatchNorm in train mode --------------------------------------------------------------


@pytest.mark.parametrize("dims", [1, 2])
def test_batchnorm_train_is_one_graph_with_eager_stats_and_grads(dims):
    torch.manual_seed(0)
    bn = (torch.nn.BatchNorm1d if dims == 1 else torch.nn.BatchNorm2d)(4, momentum=0.3)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    bn2 = copy.deepcopy(bn)
    cb = ptc.compile(bn2)
    shape = (6, 4, 5) if dims == 1 else (3, 4, 5, 5)
    for step in range(3):
        x = torch.randn(*shape, dtype=torch.float64) * 2 + 1
        bn.double(), bn2.double()
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        g = torch.randn(*shape, dtype=torch.float64)
        (bn(xe) * g).sum().backward()
        (cb(xc) * g).sum().backward()
        assert close(xc.grad, xe.grad, 1e-10)
        assert close(bn2.weight.grad, bn.weight.grad, 1e-10)
        assert close(bn2.bias.grad, bn.bias.grad, 1e-10)
        for b, c in zip(bn.buffers(), bn2.buffers()):
            assert torch.allclose(c, b, rtol=1e-12, atol=1e-12)
    assert bn2.num_batches_tracked.item() == 3
    ex = explain(bn2, x)
    assert (ex.graph_count, ex.break_count) == (1, 0)
    assert not ex.autograd_fallback


def test_batchnorm_statistics_are_written_by_the_forward_itself(tmp_path):
    """The compiled forward writes the running statistics and
    num_batches_tracked into the module's own tensors (no output copied
    back after the call: on CUDA a device-to-device copy each, 159 of
    resnet50's 1055 operations a training step), equal to eager's."""
    import glob
    import json
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8))
    me = copy.deepcopy(m)
    addresses = [b.data_ptr() for b in m.buffers()]
    old = ptc.config.trace_dir
    ptc.config.trace_dir = str(tmp_path)
    try:
        cm = ptc.compile(m)
        for _ in range(3):
            x = torch.randn(4, 3, 16, 16)
            cm(x).sum().backward()
            me(x).sum().backward()
    finally:
        ptc.config.trace_dir = old
    for b, e in zip(m.buffers(), me.buffers()):
        assert torch.allclose(b, e, rtol=1e-5, atol=1e-6)
    assert [b.data_ptr() for b in m.buffers()] == addresses
    [metrics] = glob.glob(str(tmp_path / "*" / "metrics.json"))
    assert json.load(open(metrics))["counts"].get("outputs_in_place") == 6  # 2 x (mean, var, count)


def test_statistics_written_in_place_are_not_returned_through_the_autograd_node():
    """An output the compiled forward wrote into its input is that input: the
    autograd node does not return it (torch would make a view_as and a view
    of it on every call: 318 of resnet50's 2158 aten operations a step),
    ptc._autograd.apply puts it back. The statistics still equal eager's and
    the gradients too (to float32's rounding through two batch norms)."""
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8),
                            torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, bias=False),
                            torch.nn.BatchNorm2d(8))
    me = copy.deepcopy(m)
    cm = ptc.compile(m)
    for _ in range(4):
        x, g = torch.randn(4, 3, 16, 16), torch.randn(4, 8, 12, 12)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            (cm(x) * g).sum().backward()
        (me(x) * g).sum().backward()
    node_views = [e for e in prof.events() if e.name == "aten::view_as" and e.cpu_parent is not None
                  and e.cpu_parent.name == "CompiledFunction"]
    assert node_views == []
    for b, e in zip(m.buffers(), me.buffers()):
        assert torch.allclose(b, e, rtol=1e-5, atol=1e-6)
    for p, e in zip(m.parameters(), me.parameters()):
        assert close(p.grad, e.grad, 1e-3)


def test_a_buffer_the_backward_reads_is_not_written_by_the_forward():
    """y = x * s; s.add_(1): the backward needs the old s. Eager raises at the
    backward (s was modified in place after it was saved), and so must ptc:
    had the forward's kernel written s itself, torch's version check would not
    see it and the gradient would silently use the new s (3, not 2)."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("s", torch.full((4,), 2.0))

        def forward(self, x):
            y = x * self.s
            self.s.add_(1)
            return y

    for fn in (lambda m: m, ptc.compile):
        m = Scaled()
        x = torch.ones(4, requires_grad=True)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            fn(m)(x).sum().backward()
        assert m.s.tolist() == [3.0] * 4


def test_batchnorm_train_through_torch_ops_when_compiled_autograd_is_off():
    ptc.config.compiled_autograd = False
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3)
    bn2 = copy.deepcopy(bn)
    cb = ptc.compile(bn2)
    for _ in range(2):
        x = torch.randn(2, 3, 4, 4)
        assert torch.allclose(cb(x), bn(x), atol=1e-6)
    for b, c in zip(bn.buffers(), bn2.buffers()):
        assert torch.allclose(c.float(), b.float(), atol=1e-6)
    assert no_b012(explain(bn2, x))


# ---- convolution gradients ----------------------------------------------------------------


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("dims,stride,padding,dilation,groups", [
    (2, 1, 1, 1, 1), (2, 2, 0, 1, 1), (2, (2, 1), (1, 2), (2, 1), 2), (2, 1, 1, 1, 6),
    (1, 3, 2, 2, 3), (3, 1, 1, 2, 1)])
def test_conv_gradients_match_torch_autograd(dims, stride, padding, dilation, groups, dtype, tol,
                                             tmp_path, monkeypatch):
    torch.manual_seed(0)
    conv = getattr(torch.nn, "Conv%dd" % dims)(6, 12, 3, stride=stride, padding=padding,
                                              dilation=dilation, groups=groups).to(dtype)
    conv2 = copy.deepcopy(conv)
    x = torch.randn(2, 6, *[9, 8, 7][:dims], dtype=dtype)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn_like(conv(x))
    (conv(xe) * g).sum().backward()
    monkeypatch.setenv("PTC_TRACE_DIR", str(tmp_path))
    (ptc.compile(conv2)(xc) * g).sum().backward()
    assert close(xc.grad, xe.grad, tol)
    assert close(conv2.weight.grad, conv.weight.grad, tol)
    assert close(conv2.bias.grad, conv.bias.grad, tol)
    # both gradients are one call of torch's convolution_backward, as eager's
    backward = "".join(p.read_text() for p in tmp_path.rglob("backward.ptir"))
    assert backward.count("= convolution_backward(") == 1, backward
    assert "= convolution(" not in backward and "convolution_backward_weight(" not in backward


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("needs", ["weight", "input"])
def test_conv_gradient_of_one_operand(needs, dtype, tol, tmp_path, monkeypatch):
    """Only the weight's gradient (a first layer) is torch's weight-only
    convolution_backward; only the input's (a frozen layer), a transposed
    convolution."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False).to(dtype)
    conv.weight.requires_grad_(needs == "weight")
    conv2 = copy.deepcopy(conv)
    x = torch.randn(2, 4, 7, 6, dtype=dtype, requires_grad=needs == "input")
    g = torch.randn_like(conv(x))
    monkeypatch.setenv("PTC_TRACE_DIR", str(tmp_path))
    of = (lambda m: m.weight) if needs == "weight" else (lambda m: x)
    want = torch.autograd.grad((conv(x) * g).sum(), of(conv))
    got = torch.autograd.grad((ptc.compile(conv2)(x) * g).sum(), of(conv2))
    assert close(got[0], want[0], tol)
    backward = "".join(p.read_text() for p in tmp_path.rglob("backward.ptir"))
    assert ("convolution_backward_weight(" in backward) == (needs == "weight"), backward
    assert ("= convolution(" in backward) == (needs == "input"), backward
    assert "= convolution_backward(" not in backward


@pytest.mark.parametrize("needs", ["both", "weight", "input"])
def test_conv_gradients_over_symbolic_sizes_are_compiled(needs, tmp_path, monkeypatch):
    """A convolution whose sizes went symbolic (a second image size, or
    FSDP's units of one block class at several sizes) keeps its compiled
    backward: both gradients, or the input's alone, through torch's
    convolution_backward (a transposed convolution needs static sizes for its
    output_padding), instead of running the whole graph through torch ops."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1)
    conv.weight.requires_grad_(needs != "input")
    conv.bias.requires_grad_(needs != "input")
    conv2 = copy.deepcopy(conv)
    comp = ptc.compile(conv2, dynamic=True)
    monkeypatch.setenv("PTC_TRACE_DIR", str(tmp_path))
    for hw in (7, 10):
        x = torch.randn(2, 4, hw, hw + 1, requires_grad=needs != "weight")
        g = torch.randn_like(conv(x))
        of = {"both": lambda m: (x, m.weight, m.bias), "weight": lambda m: (m.weight, m.bias),
              "input": lambda m: (x,)}[needs]
        want = torch.autograd.grad((conv(x) * g).sum(), of(conv))
        got = torch.autograd.grad((comp(x) * g).sum(), of(conv2))
        for a, b in zip(got, want):
            assert close(a, b, 1e-5)
    backward = [p.read_text() for p in tmp_path.rglob("backward.ptir")]
    assert len(backward) == 1 and "s0" in backward[0], backward
    assert ("= convolution_backward(" in backward[0]) == (needs != "weight"), backward


def test_bottleneck_at_two_sizes_trains_with_the_compiled_backward(tmp_path, monkeypatch):
    """The recompile for a second size (dims made symbolic) of a resnet
    bottleneck in train mode: gradients and running statistics as eager's,
    the backward compiled."""
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    eager = tv.models.resnet.Bottleneck(32, 8).train()
    block = copy.deepcopy(eager)
    comp = ptc.compile(block)
    monkeypatch.setenv("PTC_TRACE_DIR", str(tmp_path))
    for hw in (6, 9):
        x = torch.randn(2, 32, hw, hw)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        eager(xe).square().sum().backward()
        comp(xc).square().sum().backward()
        assert close(xc.grad, xe.grad, 1e-4)
    for pe, pc in zip(eager.parameters(), block.parameters()):
        assert close(pc.grad, pe.grad, 1e-4)
    for be, bc in zip(eager.buffers(), block.buffers()):
        assert close(bc.float(), be.float(), 1e-5)
    backward = [p.read_text() for p in tmp_path.rglob("backward.ptir")]
    assert len(backward) == 2 and sum("s0" in b for b in backward) == 1, backward


# ---- resnet18 training runs ---------------------------------------------------------------


def run_resnet18(opt_name, steps):
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    eager = tv.models.resnet18(num_classes=10).train()
    comp, start = copy.deepcopy(eager), copy.deepcopy(eager)
    # small steps: training resnet18 on a few random images is chaotic (BatchNorm
    # over 8 values per channel in layer4): two eager runs whose weights differ by
    # 1e-6 differ in loss by 1e-2 after 6 SGD steps at lr 1e-2, and after 5 steps
    # by up to 5e-4 with SGD at lr 1e-3, 1.5e-3 with AdamW at lr 1e-4 and 3e-5
    # at lr 1e-5 (on an AVX2 CPU; an earlier machine gave 3e-5 at lr 1e-4)
    make = (lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9)) if opt_name == "sgd" else \
        (lambda p: torch.optim.AdamW(p, lr=1e-5))
    opt_e, opt_c = make(eager.parameters()), make(comp.parameters())
    compiled = ptc.compile(comp)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        pair = []
        for m, opt in ((eager, opt_e), (compiled, opt_c)):
            loss = torch.nn.functional.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            pair.append(loss.item())
        losses.append(pair)
    return start, eager, comp, losses, x


def moved(model, start):
    return torch.cat([(p - q).flatten() for p, q in zip(model.parameters(), start.parameters())])


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_resnet18_training_matches_eager(opt_name):
    start, eager, comp, losses, x = run_resnet18(opt_name, steps=5)
    tol = 5e-3 if opt_name == "sgd" else 5e-4
    for le, lc in losses:
        assert abs(le - lc) <= tol * max(1.0, abs(le)), losses
    # parameters near zero (BatchNorm biases) move by about lr per AdamW step in
    # a direction rounding can flip: absolute tolerance, on unit-scale weights
    for (name, p), q in zip(eager.named_parameters(), comp.parameters()):
        assert (q - p).abs().max().item() <= 2e-3 * max(1.0, p.abs().max().item()), name
    # and the steps themselves, however small, went the same way
    want, got = moved(eager, start), moved(comp, start)
    assert torch.cosine_similarity(want, got, dim=0) > 0.99
    assert abs(got.norm() / want.norm() - 1) < 0.01
    for (name, b), c in zip(eager.named_buffers(), comp.buffers()):
        if b.dtype == torch.int64:
            assert torch.equal(c, b), name
        else:
            assert torch.allclose(c, b, rtol=tol, atol=tol), name
    ex = explain(comp, x)
    assert (ex.graph_count, ex.break_count) == (1, 0), ex.breaks
    assert not ex.autograd_fallback
