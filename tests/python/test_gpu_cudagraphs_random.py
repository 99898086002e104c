"""mode="reduce-overhead" records graphs that draw random numbers (dropout) on
CUDA (skipped without a GPU; issues 19 and 15): each recording reads its RNG
offset from its own device cell, which the recorder fills from torch's
generator before every replay, so masks change from replay to replay,
torch.manual_seed repeats them, replays match plain ptc runs after the same
seed, and a training step's backward recomputes its forward's masks even
when two forwards run before their backwards. Before, such graphs ran
without CUDA graphs, with a notice."""
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from ptc import _C, _cudagraphs  # noqa: E402

# the GPU check, fresh counters and compiled autograd on, as that suite has them
from test_gpu_cudagraphs import _fresh, compiled_autograd, plain_runs_counted  # noqa: E402,F401

DEV = "cuda"


def ptc_launches():
    c = _C._cuda_index_counts()
    return c["launches_i32"] + c["launches_i64"]


def no_graph_notices(seen):
    return [str(w.message) for w in seen
            if "random ops" in str(w.message) or "without CUDA graphs" in str(w.message)]


def dropped(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) + 1


def outputs_after_seed(c, x, calls, seed=7):
    torch.manual_seed(seed)
    return [c(x).clone() for _ in range(calls)]


def test_inference_dropout_is_recorded_and_draws_anew_at_each_replay(monkeypatch):
    c = ptc.compile(dropped, mode="reduce-overhead")
    x = torch.ones(4096, device=DEV)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = outputs_after_seed(c, x, 6)
    assert not no_graph_notices(seen), no_graph_notices(seen)
    s = _cudagraphs.stats()
    assert (s["warmups"], s["recorded"], s["replayed"]) == (1, 1, 4), s
    assert all(((o == 1) | (o == 3)).all() for o in first)
    assert len({tuple(o.tolist()) for o in first}) == 6  # a new mask each call
    # replays alone now: ptc launches nothing outside the graph
    plain = plain_runs_counted(monkeypatch)
    before = ptc_launches()
    again = outputs_after_seed(c, x, 6)
    torch.cuda.synchronize()
    assert plain == [] and ptc_launches() == before
    assert _cudagraphs.stats()["replayed"] == 4 + 6
    # torch.manual_seed repeats the masks, and plain ptc runs draw the same
    plain_c = ptc.compile(dropped)
    plain_runs = outputs_after_seed(plain_c, x, 6)
    for a, b, p in zip(first, again, plain_runs):
        assert torch.equal(a, b) and torch.equal(a, p)


class DropMLP(torch.nn.Module):
    """GPT-2's pattern: linear, GELU, dropout 0.1, linear, dropout."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.b(self.drop(torch.nn.functional.gelu(self.a(x)))))


def test_inference_module_in_training_mode_is_recorded():
    torch.manual_seed(0)
    m = DropMLP().to(DEV)
    c = ptc.compile(m, mode="reduce-overhead")
    x = torch.randn(16, 32, device=DEV)
    with torch.no_grad(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [c(x).clone() for _ in range(5)]
    assert not no_graph_notices(seen)
    assert _cudagraphs.stats()["recorded"] == 1
    zeros = [(o == 0) for o in outs]
    assert all(not torch.equal(zeros[i], zeros[i + 1]) for i in range(4))


def scaled_by_mask(x, w):
    return torch.nn.functional.dropout(x * w, 0.5, training=True)


def test_training_gradients_are_the_forwards_mask_times_the_upstream(compiled_autograd,
                                                                     monkeypatch):
    """With x = w = 1, y = mask * 2 and dy/dx = dy/dw = y: each gradient is
    its own forward's y times g, also with two forwards before their
    backwards (two forward recordings, two cells)."""
    c = ptc.compile(scaled_by_mask, mode="reduce-overhead")
    g = torch.randn(2048, device=DEV)
    w = torch.ones(2048, device=DEV, requires_grad=True)
    ys = set()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(6):
            xs = [torch.ones(2048, device=DEV, requires_grad=True) for _ in range(1 + step % 2)]
            outs = [c(x, w) for x in xs]
            for y in outs:
                (y * g).sum().backward()
            for x, y in zip(xs, outs):
                torch.testing.assert_close(x.grad, g * y.detach())
                ys.add(tuple((y != 0).tolist()))
            w.grad = None
    assert not no_graph_notices(seen), no_graph_notices(seen)
    assert len(ys) == 9  # every forward a new mask
    s = _cudagraphs.stats()
    assert s["recorded"] >= 4 and s["replayed"] >= 4, s
    plain = plain_runs_counted(monkeypatch)
    before = ptc_launches()
    x = torch.ones(2048, device=DEV, requires_grad=True)
    y = c(x, w)
    (y * g).sum().backward()
    torch.cuda.synchronize()
    assert plain == [] and ptc_launches() == before  # a replayed step runs ptc only in graphs
    torch.testing.assert_close(x.grad, g * y.detach())


def sgd_losses(model, steps=6, seed=5):
    torch.manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator(device=DEV).manual_seed(0)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(16, 32, device=DEV, generator=gen)).pow(2).mean()
        loss.backward()
        losses.append(float(loss))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses


def test_training_losses_repeat_under_manual_seed_and_match_plain_runs(compiled_autograd):
    torch.manual_seed(0)
    init = DropMLP().to(DEV).state_dict()

    def losses(mode):
        m = DropMLP().to(DEV)
        m.load_state_dict(init)
        return sgd_losses(ptc.compile(m, mode=mode))

    first, second = losses("reduce-overhead"), losses("reduce-overhead")
    assert _cudagraphs.stats()["replayed"] >= 8
    torch.testing.assert_close(first, second, rtol=1e-6, atol=1e-7)  # masks repeat
    torch.testing.assert_close(first, losses("default"), rtol=1e-5, atol=1e-6)
