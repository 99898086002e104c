"""Training under ptc.compile: a graph whose inputs require gradients runs as
one autograd node with a compiled forward and a compiled backward
(compiler/autograd, capture/backend/backend_train.c). Losses, gradients, parameters
after optimizer steps and BatchNorm statistics are compared with eager."""
import copy
import os

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


@pytest.fixture(autouse=True)
def compiled_autograd():
    """Compiled training is the default (ptc.config.compiled_autograd); these
    tests hold it on whatever the environment says."""
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = False


def close(a, b, tol):
    scale = max(b.abs().max().item(), 1e-6)
    return (a - b).abs().max().item() <= tol * scale


def explain(model, *args, **kwargs):
    ex = ptc.explain(model, backend="ptc")(*args, **kwargs)
    return ex


def train_side_by_side(model, batches, lossf, steps, lr=1e-3):
    """Eager and compiled copies, AdamW, the same batches: per-step losses."""
    torch.manual_seed(0)
    eager, comp = model, copy.deepcopy(model)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=lr)
    opt_c = torch.optim.AdamW(comp.parameters(), lr=lr)
    compiled = ptc.compile(comp)
    losses = []
    for step in range(steps):
        args, kwargs = batches(step)
        pair = []
        for m, opt in ((eager, opt_e), (compiled, opt_c)):
            loss = lossf(m(*args, **kwargs))
            opt.zero_grad()
            loss.backward()
            opt.step()
            pair.append(loss.item())
        losses.append(pair)
    return eager, comp, losses


def test_mlp_gradients_match_eager(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4),
                            torch.nn.LogSoftmax(-1))
    m2 = copy.deepcopy(m)
    x = torch.randn(5, 8, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    target = torch.tensor([0, 1, 2, 3, 0])
    loss = torch.nn.functional.nll_loss(m(x), target)
    loss.backward()
    ptc.config.trace_dir = str(tmp_path)
    try:
        compiled = ptc.compile(m2)
        loss2 = torch.nn.functional.nll_loss(compiled(x2), target)
        loss2.backward()
    finally:
        ptc.config.trace_dir = None
    assert close(loss2.detach(), loss.detach(), 1e-6)
    assert close(x2.grad, x.grad, 1e-5)
    for p, q in zip(m.parameters(), m2.parameters()):
        assert close(q.grad, p.grad, 1e-5)
    # the trace holds the joint graph and its two halves
    names = {f for _, _, files in os.walk(tmp_path) for f in files}
    assert {"joint.ptir", "forward.ptir", "backward.ptir"} <= names, names
    ex = explain(m2, x2)
    assert not ex.autograd_fallback and ex.graph_count == 1


def test_cnn_training_steps_match_eager():
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, groups=2, stride=2), torch.nn.SiLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))
    g = torch.Generator().manual_seed(1)
    batches = lambda s: ((torch.randn(4, 3, 16, 16, generator=g),), {})  # noqa: E731
    eager, comp, losses = train_side_by_side(
        cnn, batches, lambda o: torch.nn.functional.cross_entropy(o, torch.arange(4)), steps=5)
    for le, lc in losses:
        assert abs(le - lc) <= 1e-5 * max(1.0, abs(le)), losses
    for p, q in zip(eager.parameters(), comp.parameters()):
        assert close(q, p, 1e-4)
    assert not explain(comp, torch.randn(4, 3, 16, 16)).autograd_fallback


def smooth_resnet18(tv):
    """resnet18 with SiLU for ReLU and an average pool for the max pool: no
    kinks. ReLU and max-pool gradients flip wherever a float32 activation
    lands on the other side of a kink than float64's: eager's own float32
    gradients were 5e-3 to 3e-1 from float64's on 9 of 30 random batches of
    8x3x64x64 (one relu input of 1.5e-6 whose float32 sum of 1.248 - 1.248
    rounds to 0 or to 6e-6 by summation order cuts or passes a gradient)."""
    m = tv.models.resnet18(num_classes=10)
    blocks = [m] + [b for layer in (m.layer1, m.layer2, m.layer3, m.layer4) for b in layer]
    for b in blocks:
        b.relu = torch.nn.SiLU()
    m.maxpool = torch.nn.AvgPool2d(3, 2, 1)
    return m.train()


def assert_grads_near_float64(eager, comp, ref):
    """comp's parameter gradients are as close to float64's (ref) as eager's."""
    for (name, p), q, r in zip(eager.named_parameters(), comp.parameters(), ref.parameters()):
        scale = max(r.grad.abs().max().item(), 1e-6)
        e_err = (p.grad.double() - r.grad).abs().max().item() / scale
        c_err = (q.grad.double() - r.grad).abs().max().item() / scale
        assert c_err <= 3 * e_err + 2e-5, (name, c_err, e_err)


def test_resnet18_train_mode_step():
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = smooth_resnet18(tv)
    m2, ref = copy.deepcopy(m), copy.deepcopy(m).double()
    x = torch.randn(8, 3, 64, 64)
    m(x).pow(2).mean().backward()
    ptc.compile(m2)(x).pow(2).mean().backward()
    ref(x.double()).pow(2).mean().backward()
    # train-mode BatchNorm sums over batch and space: judged against float64
    assert_grads_near_float64(m, m2, ref)
    for (name, b), c in zip(m.named_buffers(), m2.buffers()):
        assert torch.allclose(c.float(), b.float(), rtol=1e-4, atol=1e-5), name


def test_relu_passes_no_gradient_at_zero():
    """torch's relu gradient is 0 at x == 0 (ptc's maximum(x, 0) gave half)."""
    x = torch.tensor([-1.0, 0.0, 2.0, -0.0, float("nan")], requires_grad=True)
    y = x.detach().clone().requires_grad_()
    ptc.compile(lambda t: torch.relu(t) * 3)(x).sum().backward()
    (torch.relu(y) * 3).sum().backward()
    assert torch.equal(x.grad, y.grad), (x.grad, y.grad)


def test_gpt2_training_steps_match_eager():
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                       resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0)
    g = torch.Generator().manual_seed(2)

    def batches(step):
        ids = torch.randint(0, 100, (2, 16), generator=g)
        return (), {"input_ids": ids, "labels": ids, "use_cache": False}

    eager, comp, losses = train_side_by_side(T.GPT2LMHeadModel(cfg), batches, lambda o: o.loss,
                                             steps=4)
    for le, lc in losses:
        assert abs(le - lc) <= 1e-4 * abs(le), losses
    args, kwargs = batches(0)
    assert not explain(comp, *args, **kwargs).autograd_fallback


def test_no_grad_and_requires_grad_changes():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    f = ptc.compile(lambda x: torch.tanh(lin(x)).sum())
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert close(f(x), torch.tanh(lin(x)).sum(), 1e-6)
    xg = x.clone().requires_grad_()
    f(xg).backward()
    xe = x.clone().requires_grad_()
    torch.tanh(lin(xe)).sum().backward()
    assert close(xg.grad, xe.grad, 1e-5)


def test_retain_graph_and_accumulation():
    torch.manual_seed(0)
    w = torch.randn(6, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    f = ptc.compile(lambda v: (v.exp() * v.sin()).sum())
    out = f(w2)
    out.backward(retain_graph=True)
    out.backward()
    ref = (w.exp() * w.sin()).sum()
    ref.backward(retain_graph=True)
    ref.backward()
    assert close(w2.grad, w.grad, 1e-6)


def test_double_backward_is_a_clear_error():
    w = torch.randn(5, requires_grad=True)
    f = ptc.compile(lambda v: (v * v * v).sum())
    with pytest.raises(RuntimeError, match="double backward .create_graph=True. through a "
                                           "compiled graph is not supported"):
        torch.autograd.grad(f(w), w, create_graph=True)
    (g,) = torch.autograd.grad(f(w), w)  # first order still works
    assert close(g, 3 * w.detach() ** 2, 1e-6)


def test_off_says_so():
    ptc.config.compiled_autograd = False
    lin = torch.nn.Linear(3, 2)
    ex = explain(lin, torch.randn(4, 3))
    assert ex.autograd_fallback
    assert any("compiled autograd is off" in f.get("why", "") for f in ex.fallbacks)


def test_op_without_derivative_falls_back_with_its_reason():
    torch.manual_seed(0)
    m = torch.nn.ConvTranspose2d(3, 2, 3)
    m2 = copy.deepcopy(m)
    x = torch.randn(1, 3, 5, 5)
    m(x).sum().backward()
    ex = explain(m2, x)
    assert ex.autograd_fallback
    why = [f.get("why", "") for f in ex.fallbacks]
    assert any("transposed" in w for w in why), why
    ptc.compile(m2)(x).sum().backward()
    assert close(m2.weight.grad, m.weight.grad, 1e-5)


@pytest.mark.filterwarnings("ignore:To copy construct")
def test_detached_values_carry_no_gradient():
    """x.detach() and torch.tensor(x) inside a compiled training graph stop
    the gradient, as in eager: the backward gave x.detach() * 2 + x a
    gradient of 3 (it differentiated through the detach), and the detached
    outputs came back requiring grad."""
    def f(x):
        return x.detach() * 2 + x, torch.tensor(x), x.detach(), (x * 3).detach()

    results = []
    for fn in (f, ptc.compile(f)):
        x = torch.arange(3.0, requires_grad=True)
        outs = fn(x)
        outs[0].sum().backward()
        results.append(([o.requires_grad for o in outs], x.grad.tolist(),
                        [o.tolist() for o in outs]))
    assert results[1] == results[0] == ([True, False, False, False], [1.0, 1.0, 1.0],
                                        [[0.0, 3.0, 6.0], [0.0, 1.0, 2.0], [0.0, 1.0, 2.0],
                                         [0.0, 3.0, 6.0]])
    ex = explain(f, torch.arange(3.0, requires_grad=True))
    assert not ex.autograd_fallback, ex.fallbacks
