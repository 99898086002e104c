"""The per-call cost of a compiled training graph (issues 19, 20): what
ptc._autograd needs of a program that does not change between calls (its
outputs' tangents, the inputs its gradients belong to, the outputs written
into inputs) is worked out on the program's first call and kept on it (the
program's ``plan``), not again on every forward and backward; the node runs
through torch's Function.apply path without its per-call setup. Gradients,
non-differentiable outputs and outputs written in place stay eager's."""
import copy

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
import ptc._autograd as autograd  # noqa: E402

# compiled training (the default): on for every test here, whatever the environment says
from test_training import compiled_autograd  # noqa: E402,F401


class Unit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)

    def forward(self, x):
        h = torch.relu(self.bn(self.fc(x)))
        return h, h.argmax(dim=1)  # the second output has no gradient


def run_chain(units, x, steps):
    for _ in range(steps):
        for u in units:
            for p in u.parameters():
                p.grad = None
        h, picks = x, []
        for u in units:
            h, pick = u(h)
            picks.append(pick)
        h.pow(2).sum().backward()
    return h, picks


def test_each_program_works_out_its_plan_once_and_gradients_stay_eagers(monkeypatch):
    made = []

    class Counted(autograd._Plan):
        __slots__ = ()

        def __init__(self, program):
            made.append(program)
            super().__init__(program)

    monkeypatch.setattr(autograd, "_Plan", Counted)
    torch.manual_seed(0)
    eager = [Unit().train() for _ in range(3)]
    units = [copy.deepcopy(u) for u in eager]
    compiled = [ptc.compile(u) for u in units]
    x = torch.randn(4, 8)
    h_eager, picks_eager = run_chain(eager, x, 3)
    h, picks = run_chain(compiled, x, 3)
    assert len(made) == 3, "one plan per unit's program, made on its first call"
    assert all(type(p.plan) is Counted for p in made)
    node = h.grad_fn
    assert type(node).__name__ == "CompiledFunctionBackward"
    assert node.plan is node.program.plan
    torch.testing.assert_close(h, h_eager)
    for pe, p in zip(picks_eager, picks):
        assert torch.equal(p, pe) and not p.requires_grad
    for ue, u in zip(eager, units):
        for (name, pe), p in zip(ue.named_parameters(), u.parameters()):
            torch.testing.assert_close(p.grad, pe.grad, rtol=1e-4, atol=1e-4, msg=name)
            assert p.grad.stride() == pe.grad.stride(), name
        torch.testing.assert_close(u.bn.running_mean, ue.bn.running_mean)
        torch.testing.assert_close(u.bn.running_var, ue.bn.running_var)
        assert int(u.bn.num_batches_tracked) == int(ue.bn.num_batches_tracked) == 3
