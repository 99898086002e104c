"""Random ops in compiled training: ptc's counter-based generator draws with a
per-op seed and a per-run offset taken from torch's generator, so
torch.manual_seed repeats ptc's dropout masks, and the backward of a graph
runs with its forward's offset, so every mask it recomputes is the forward's.
Attention with dropout is written out in prims and differentiated like any
other graph; its gradients are checked against torch autograd with the same
mask (read back from ptc through an identity value matrix)."""
import copy
import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import ptc  # noqa: E402


# compiled training (the default): on for every test here, whatever the environment says
from test_training import compiled_autograd  # noqa: E402,F401


def fallbacks(fn, *args):
    ex = ptc.explain(fn, backend="ptc")(*args)
    return ex.graph_count, ex.autograd_fallback, [f.get("why", "") for f in ex.fallbacks]


def test_gradient_of_a_random_factor_uses_the_forward_draws():
    # x * rand_like(x): the backward reads the random tensor again; it must
    # draw what the forward drew (main drew again with a new offset)
    f = ptc.compile(lambda x: x * torch.rand_like(x))
    x = torch.randn(4096).add_(3).requires_grad_()
    y = f(x)
    y.sum().backward()
    assert torch.allclose(x.grad, y.detach() / x.detach(), rtol=1e-5, atol=1e-6)


def test_dropout_repeats_under_manual_seed():
    f = ptc.compile(lambda x: F.dropout(x, 0.5, training=True) * 2)
    x = torch.ones(10000)

    def run(seed, grad):
        torch.manual_seed(seed)
        xi = x.clone().requires_grad_(grad)
        return f(xi).detach()

    for grad in (False, True):
        a, b, c = run(0, grad), run(0, grad), run(1, grad)
        assert torch.equal(a, b)
        assert not torch.equal(a, c)
    # two draws in a row differ
    torch.manual_seed(0)
    assert not torch.equal(f(x), f(x))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_statistics(p):
    f = ptc.compile(lambda x: F.dropout(x, p, training=True))
    n = 200_000
    torch.manual_seed(3)
    x = torch.ones(n, requires_grad=True)
    y = f(x)
    kept = y.detach() != 0
    frac = kept.double().mean().item()
    assert abs(frac - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n), frac
    assert torch.allclose(y.detach()[kept], torch.full_like(y.detach()[kept], 1 / (1 - p)))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # the backward's mask is the forward's
    assert torch.allclose(x.grad, y.detach())


def attention_reference(q, k, v, keep, p, mask=None, causal=False, scale=None):
    """torch's math path with an explicit dropout mask."""
    scale = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        L, S = s.shape[-2:]
        mask = torch.ones(L, S, dtype=torch.bool).tril()
    if mask is not None and mask.dtype == torch.bool:
        s = s.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        s = s + mask
    w = torch.softmax(s, -1).nan_to_num(0)  # a fully masked row gives zeros
    return (w * keep / (1 - p)) @ v


@pytest.mark.parametrize("variant", ["plain", "bool_mask", "float_mask", "causal", "scale"])
def test_attention_dropout_gradients_match_torch_with_the_same_mask(variant):
    torch.manual_seed(0)
    B, H, L, S, E, p = 2, 3, 7, 6, 4, 0.3
    mask = None
    if variant == "bool_mask":
        mask = torch.rand(L, S) > 0.3
        mask[2] = False  # a fully masked row
    elif variant == "float_mask":
        mask = torch.randn(B, 1, L, S)
    causal = variant == "causal"
    scale = 0.7 if variant == "scale" else None

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                              is_causal=causal, scale=scale)

    f = ptc.compile(attn)
    q, k = torch.randn(B, H, L, E), torch.randn(B, H, S, E)
    v = torch.randn(B, H, S, S)
    # the same seed gives the same mask: read it through v = identity
    torch.manual_seed(7)
    with torch.no_grad():
        weights = f(q, k, torch.eye(S).expand(B, H, S, S).contiguous())
    keep = weights != 0
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    torch.manual_seed(7)
    out = f(qc, kc, vc)
    g = torch.randn_like(out)
    out.backward(g)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    ref = attention_reference(qr, kr, vr, keep, p, mask, causal, scale)
    ref.backward(g)
    assert torch.allclose(out, ref, atol=1e-5)
    for c, r in ((qc, qr), (kc, kr), (vc, vr)):
        assert torch.allclose(c.grad, r.grad, atol=1e-5)
    graphs, fell_back, why = fallbacks(attn, qc, kc, vc)
    assert graphs == 1 and not fell_back, why
    # of the weights attention gives, about 1-p are kept
    given = attention_reference(q, k, torch.eye(S), torch.ones(()), 0, mask, causal, scale) != 0
    assert 0.5 < keep.sum().item() / given.sum().item() < 0.9


def test_attention_dropout_statistics():
    f = ptc.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.25))
    q = torch.zeros(4, 8, 64, 16)  # uniform weights 1/S
    v = torch.eye(64).expand(4, 8, 64, 64).contiguous()
    torch.manual_seed(5)
    w = f(q, q, v)
    kept = w != 0
    n = kept.numel()
    assert abs(kept.double().mean().item() - 0.75) < 5 * math.sqrt(0.25 * 0.75 / n)
    assert torch.allclose(w[kept], torch.full_like(w[kept], 1 / 64 / 0.75))


def test_mlp_with_dropout_trains_deterministically():
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                   torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Dropout(0.2),
                                   torch.nn.Linear(64, 4))

    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(16, 4, generator=g)
    xs = [torch.randn(32, 16, generator=g) for _ in range(15)]
    data = [(x, (x @ teacher).argmax(1)) for x in xs]

    def train(m, seed, compiled=True):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        run = ptc.compile(m) if compiled else m
        torch.manual_seed(seed)
        losses = []
        for x, y in data:
            loss = F.cross_entropy(run(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, m

    base = model()
    a, ma = train(copy.deepcopy(base), 0)
    b, mb = train(copy.deepcopy(base), 0)
    c, _ = train(copy.deepcopy(base), 1)
    assert a == b and a != c  # the seed decides the masks, run to run
    for p, q in zip(ma.parameters(), mb.parameters()):
        assert torch.equal(p, q)
    assert sum(a[-5:]) < sum(a[:5])  # it learns
    x, _ = data[0]
    graphs, fell_back, why = fallbacks(copy.deepcopy(base).train(), x)
    assert graphs == 1 and not fell_back, why
    # without dropout the compiled steps are eager's
    e, _ = train(copy.deepcopy(base).eval(), 0, compiled=False)
    comp, _ = train(copy.deepcopy(base).eval(), 0)
    assert all(abs(u - w) <= 1e-5 * max(1, abs(u)) for u, w in zip(e, comp)), (e, comp)


def test_a_train_programs_forward_takes_its_offset_and_saves_it_for_the_backward():
    """TrainProgram.forward(rng=): what a CUDA graph recorder passes (its
    offset cell; on the CPU a tensor whose value is the offset). The forward
    draws with it instead of drawing from torch's generator, saves that very
    object last, and the backward recomputes the same mask from it; a
    forward without rng draws as a plain call does."""
    from ptc import _C
    x = torch.ones(4096, requires_grad=True)
    y = ptc.compile(lambda t: F.dropout(t, 0.5, training=True))(x)
    program = y.grad_fn.program
    assert program.draws
    offset = torch.tensor(12345)
    first = program.forward(x.detach(), rng=offset)
    again = program.forward(x.detach(), rng=offset)
    other = program.forward(x.detach(), rng=torch.tensor(12346))
    assert first[-1] is offset and torch.equal(first[0], again[0])
    assert not torch.equal(first[0], other[0])
    g = torch.randn(4096)
    (grad,) = program.backward(*first[program.noutputs:], g)
    assert torch.equal(grad, g * first[0])  # x = 1: y = mask * 2 = dy/dx
    torch.manual_seed(4)
    drawn = program.forward(x.detach())
    torch.manual_seed(4)
    assert torch.equal(program.forward(x.detach(), rng=_C._rng_draw())[0], drawn[0])
