"""Outputs of a compiled training graph that get no gradient (the loss does
not use them: GPT-2's present keys and values) are not fed to the compiled
backward as tensors of zeros: it runs a variant compiled with those
gradients known zeros and folded away (compiler/autograd/absent.c), once
per set of such outputs. No aten::zeros runs in the step, and the
gradients are eager's whichever outputs the loss uses, with retain_graph
and a second backward through other outputs too."""
import copy

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import profile  # noqa: E402

import ptc  # noqa: E402

# compiled training (the default): on for every test here, whatever the environment says
from test_training import compiled_autograd  # noqa: E402,F401


class ThreeOutputs(torch.nn.Module):
    """Outputs that reach the weights through a product, a matmul and a sum."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 8)
        self.l2 = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.l1(x)
        return torch.tanh(h) * 2, self.l2(h) + h, (h * h).sum(1)


def grads(model):
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone()
            for p in model.parameters()]


def zeros_made(step):
    """The tensors of zeros step() makes (torch.zeros, zero_)."""
    with profile() as prof:
        step()
    return sum(e.count for e in prof.key_averages() if e.key in ("aten::zeros", "aten::zero_"))


def pair():
    torch.manual_seed(0)
    eager = ThreeOutputs()
    comp = copy.deepcopy(eager)
    return eager, comp, ptc.compile(comp)


@pytest.mark.parametrize("used", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_gradients_match_eager_whichever_outputs_the_loss_uses(used):
    eager, comp, compiled = pair()
    x = torch.randn(4, 8)
    sum(eager(x)[i].sum() for i in used).backward()

    def step():
        out = compiled(x)
        sum(out[i].sum() for i in used).backward()

    assert zeros_made(step) == 0
    for a, b in zip(grads(comp), grads(eager)):
        torch.testing.assert_close(a, b)


def test_a_retained_graph_runs_a_second_backward_through_other_outputs():
    eager, comp, compiled = pair()
    x = torch.randn(4, 8)
    for model in (eager, compiled):
        out = model(x)
        out[0].sum().backward(retain_graph=True)
        (out[1] * 3).sum().backward(retain_graph=True)
        out[2].sum().backward()
    for a, b in zip(grads(comp), grads(eager)):
        torch.testing.assert_close(a, b)


def test_the_same_unused_outputs_every_step_compile_once(monkeypatch):
    eager, comp, compiled = pair()
    x = torch.randn(4, 8)
    compiled(x)[0].sum().backward()  # compiles the variant without outputs 1 and 2
    seen = []
    real = ptc._autograd.CompiledFunction.backward

    def watching(ctx, *gs):
        seen.append((sum(g is None for g in gs), ctx.program))
        return real(ctx, *gs)

    monkeypatch.setattr(ptc._autograd.CompiledFunction, "backward", staticmethod(watching))
    for _ in range(3):
        compiled(x)[0].sum().backward()
    assert [absent for absent, _ in seen] == [2, 2, 2]
    assert [program.backward_variants for _, program in seen] == [1, 1, 1]
    compiled(x)[1].sum().backward()
    assert seen[-1][1].backward_variants == 2


def test_gpt2_with_its_cache_outputs_unused_makes_no_zeros():
    T = pytest.importorskip("transformers")
    cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                       resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    eager = T.GPT2LMHeadModel(cfg)
    comp = copy.deepcopy(eager)
    compiled = ptc.compile(comp)
    ids = torch.randint(0, 100, (2, 16))
    eager(input_ids=ids, labels=ids).loss.backward()

    def step():
        compiled(input_ids=ids, labels=ids).loss.backward()

    step()  # compiles
    comp.zero_grad(set_to_none=True)
    assert zeros_made(step) == 0
    for a, b in zip(grads(comp), grads(eager)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
