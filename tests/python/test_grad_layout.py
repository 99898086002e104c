"""The gradient-layout contract under compiled autograd: after a compiled
training step every .grad is strided as eager's (torch's AccumulateGrad
contract: the parameter's strides where it is non-overlapping and dense,
else contiguous; DDP's bucket views and fused optimizers rely on it) and
equals eager's. ptc._autograd fits the compiled backward's gradients to it.
"""
import copy
import weakref

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import ptc  # noqa: E402
from ptc import _autograd  # noqa: E402
from test_training import compiled_autograd  # noqa: E402,F401

FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


def grads_after_steps(model, x, steps=1, **compile_options):
    """{name: .grad} after the last of `steps` backwards (each from no
    gradients) of the squared-mean loss of model on x, compiled with
    compile_options, or eager without them."""
    run = ptc.compile(model, **compile_options) if compile_options else model
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        run(x).square().mean().backward()
    return {name: p.grad for name, p in model.named_parameters()}


def contract_strides(param, eager_grad):
    """The strides a compiled .grad must have: eager's, or the parameter's
    own where eager's differ from them only in size-1 dims. AccumulateGrad
    keeps such a gradient as it comes (the sum behind a [1,C,1,1] scale's;
    on CUDA, cuDNN's [K,C,1,1] weight gradient, [C,1,1,1]-strided for a
    channels-last [C,1,C,C] parameter), and DDP then warns in eager too; ptc
    gives the parameter's strides, which the contract and DDP's bucket view
    name."""
    if eager_grad.stride() == param.stride():
        return param.stride()
    if all(g == p for g, p, size in zip(eager_grad.stride(), param.stride(), param.shape)
           if size != 1):
        return param.stride()
    return eager_grad.stride()


def assert_strided_as_eager(model, x, tol=1e-4, steps=1, mode="default"):
    """The .grads of a compiled step (the last of `steps`, under mode)
    against eager's: strided as contract_strides says and values within tol
    of the largest."""
    eager = grads_after_steps(model, x)
    got = grads_after_steps(model, x, steps, backend="ptc", mode=mode)
    params = dict(model.named_parameters())
    for name, ref in eager.items():
        want = contract_strides(params[name], ref)
        assert got[name].stride() == want, (name, tuple(params[name].shape), params[name].stride(),
                                            "eager", ref.stride(), "ptc", got[name].stride())
        scale = max(ref.abs().max().item(), 1e-6)
        assert (got[name] - ref).abs().max().item() <= tol * scale, name


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_resnet_grads_are_strided_as_eager(fmt, device="cpu", steps=1, mode="default"):
    """A small torchvision ResNet (a BasicBlock per stage, so three 1x1
    downsample convolutions) with contiguous and channels-last parameters:
    channels-last 1x1 weights came back [K,1,1,1] where eager's are
    [K,1,K,K] (fails on main). In float64: float32's relu and max-pool kinks
    round differently in channels-last and contiguous sums."""
    torch.manual_seed(0)
    model = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1],
                                             num_classes=10)
    model = model.to(device, torch.float64, memory_format=FORMATS[fmt])
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64).to(device, memory_format=FORMATS[fmt])
    assert_strided_as_eager(model, x, tol=1e-9, steps=steps, mode=mode)


def test_channels_last_weight_gradients_are_not_copied(monkeypatch):
    """A channels-last ResNet's weight gradients: torch's convolution_backward
    returns them channels-last, and the compiled backward hands them out so
    (a CPU backward's extern outputs keep torch's dense layout) instead of
    copying them contiguous for ptc._autograd to copy back: 9 copies a step
    into the parameters' layout before (17 for resnet18), none now."""
    copies = []
    fit = _autograd._fit_layout

    def counting(g, want):
        out = fit(g, want)
        if out[1] is not None:
            copies.append(tuple(g.shape))
        return out

    monkeypatch.setattr(_autograd, "_fit_layout", counting)
    torch.manual_seed(0)
    model = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1],
                                             num_classes=10).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32).to(memory_format=torch.channels_last)
    grads = grads_after_steps(model, x, backend="ptc")
    assert copies == []
    for name, p in model.named_parameters():
        assert grads[name].stride() == p.stride(), name


class Odd(torch.nn.Module):
    """Parameters whose gradient layout is not plain contiguous: a 1x1
    convolution weight [C,K,1,1] (ambiguous strides), a channels-last
    [1,C,1,1] scale, a transposed matrix and an expanded (overlapping) bias."""

    def __init__(self, memory_format):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1).to(memory_format=memory_format)
        self.proj = torch.nn.Conv2d(16, 32, 1).to(memory_format=memory_format)
        self.scale = torch.nn.Parameter(torch.randn(1, 32, 1, 1).to(memory_format=torch.channels_last))
        self.wt = torch.nn.Parameter(torch.randn(10, 32).t())  # [32, 10], strides (1, 32)
        self.bias = torch.nn.Parameter(torch.randn(1, 10).expand(4, 10))  # strides (0, 1)

    def forward(self, x):
        h = self.proj(torch.relu(self.conv(x))) * self.scale
        return h.mean((2, 3)) @ self.wt + self.bias


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_ambiguous_transposed_and_expanded_parameters(fmt, device="cpu", steps=1, mode="default"):
    """Every .grad strided as eager's, but the [1,C,1,1] scale's: eager
    keeps its sum's contiguous result there, ptc gives the parameter's own
    strides (see contract_strides)."""
    torch.manual_seed(0)
    assert_strided_as_eager(Odd(FORMATS[fmt]).to(device), torch.randn(4, 3, 8, 8, device=device),
                            steps=steps, mode=mode)


class Broken(torch.nn.Module):
    """A graph break between two conv blocks: the second graph's input is a
    non-leaf whose gradient goes to the first graph's backward."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.sum() > 0:  # a break: the value decides
            h = h * 2
        return self.b(h)


def test_grads_through_a_graph_break_are_strided_as_eager():
    torch.manual_seed(0)
    model = Broken().to(memory_format=torch.channels_last)
    assert_strided_as_eager(model, torch.randn(2, 3, 8, 8))


def test_input_gradient_is_strided_as_the_input():
    """A leaf input (the batch) that wants its gradient, channels-last."""
    torch.manual_seed(0)
    model = Broken()
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    grads = []
    for run in (model, ptc.compile(copy.deepcopy(model))):
        xi = x.clone().requires_grad_(True)
        run(xi).square().mean().backward()
        grads.append(xi.grad)
    assert grads[1].stride() == grads[0].stride() == x.stride()
    assert torch.allclose(grads[1], grads[0], rtol=1e-4, atol=1e-6)


def test_size1_strides_are_fitted_without_a_copy():
    """A gradient differing from the contract only in its size-1 dims'
    strides is the same memory restrided; a truly different one is a copy
    for a leaf's first gradient, and left as it is for a non-leaf (the node
    before it takes any layout) or a leaf with a .grad (AccumulateGrad adds
    to that in place)."""
    g = torch.randn(8, 4, 1, 1)
    cl = torch.empty(8, 4, 1, 1).to(memory_format=torch.channels_last).stride()
    leaf = torch.zeros(8, 4, 1, 1).to(memory_format=torch.channels_last)
    fitted, fresh = _autograd._fit_layout(g, (cl, weakref.ref(leaf)))
    assert fitted.stride() == cl and fitted.data_ptr() == g.data_ptr() and fresh is None
    g = torch.randn(8, 4, 3, 3)
    leaf = torch.zeros(8, 4, 3, 3).to(memory_format=torch.channels_last)
    cl = leaf.stride()
    fitted, fresh = _autograd._fit_layout(g, (cl, weakref.ref(leaf)))
    assert fitted.stride() == cl and fresh is fitted and torch.equal(fitted, g)
    assert _autograd._fit_layout(g, (cl, None)) == (g, None)  # a non-leaf's
    leaf.grad = torch.zeros_like(leaf)  # AccumulateGrad adds to it in place
    assert _autograd._fit_layout(g, (cl, weakref.ref(leaf))) == (g, None)


def test_contract_strides():
    """torch's rule: dense and non-overlapping keeps its strides (in any dim
    order, size-1 dims with any stride), else contiguous."""
    assert _autograd._contract_strides((8, 4, 3, 3), (36, 1, 12, 4)) == (36, 1, 12, 4)
    assert _autograd._contract_strides((8, 4, 1, 1), (4, 1, 4, 4)) == (4, 1, 4, 4)
    assert _autograd._contract_strides((32, 10), (1, 32)) == (1, 32)
    assert _autograd._contract_strides((4, 10), (0, 1)) == (10, 1)  # expanded
    assert _autograd._contract_strides((4, 5), (10, 2)) == (5, 1)  # a strided slice: gaps
