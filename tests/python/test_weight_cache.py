"""Kept channels-last copies of convolution weights
(compiler/capture/backend/weight_cache.c): an inference program whose
convolutions read channels-last inputs hands them channels-last weights,
copied once and kept while each weight is the same tensor at the same
version, instead of torch's convolution copying each weight into that layout
on every call. An in-place write to a weight makes a new copy on the next
call; results equal eager's throughout. test_gpu_weight_cache.py runs these
on CUDA tensors."""
import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import ptc


@pytest.fixture(autouse=True)
def _weight_cache_on(monkeypatch):
    """The cache is opt-in (PTC_WEIGHT_CACHE=1); each test turns it on. The
    BatchNorm after conv1 stays (PTC_FOLD_CONV=0): folded, conv1's weight
    would be computed in the graph, not a kept graph input
    (test_fold_conv_bn.py)."""
    monkeypatch.setenv("PTC_WEIGHT_CACHE", "1")
    monkeypatch.setenv("PTC_FOLD_CONV", "0")


class ConvOps(TorchDispatchMode):
    """What one or more calls ask of torch: the convolutions, by whether
    their weight arrives channels-last, and the copies into channels-last."""

    def __init__(self):
        super().__init__()
        self.weights = []  # per convolution: its weight is channels-last (and not contiguous)
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.convolution.default:
            w = args[1]
            self.weights.append(w.is_contiguous(memory_format=torch.channels_last)
                                and not w.is_contiguous())
        elif func is torch.ops.aten.clone.default and \
                kwargs.get("memory_format") is torch.channels_last:
            self.copies += 1
        return func(*args, **kwargs)


class ConvChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(self.bn(self.conv1(x))))


def model(dev="cpu"):
    torch.manual_seed(0)
    return ConvChain().eval().to(dev)


X = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(0))


def assert_near(got, want):
    """Equal, within cuDNN's TF32 convolutions (another algorithm for each
    layout) on CUDA."""
    if got.is_cuda:
        torch.testing.assert_close(got, want, rtol=5e-3, atol=5e-3 * want.abs().max().item())
    else:
        torch.testing.assert_close(got, want)


def test_weights_are_copied_once_across_calls(dev="cpu"):
    net, x = model(dev), X.to(dev)
    cm = ptc.compile(net)
    with torch.no_grad():
        with ConvOps() as first:
            cm(x)
        with ConvOps() as later:
            got = cm(x)
            cm(x)
        want = net(x)
    assert first.copies == 2 and first.weights == [True, True]
    assert later.copies == 0, "the kept copies were not reused"
    assert later.weights == [True] * 4
    assert_near(got, want)


def test_an_in_place_update_of_a_weight_makes_a_new_copy(dev="cpu"):
    net, x = model(dev), X.to(dev)
    cm = ptc.compile(net)
    with torch.no_grad():
        cm(x)
        cm(x)
        net.conv2.weight.mul_(-2)  # its _version moves on
        with ConvOps() as after:
            got = cm(x)
        assert_near(got, net(x))
        net.conv1.weight[0].zero_()  # through a view: the same version counter
        assert_near(cm(x), net(x))
        with ConvOps() as later:
            assert_near(cm(x), net(x))
    assert after.copies == 1 and after.weights == [True, True]
    assert later.copies == 0


def test_a_new_weight_tensor_makes_a_new_copy(dev="cpu"):
    net, x = model(dev), X.to(dev)
    cm = ptc.compile(net)
    with torch.no_grad():
        cm(x)
        net.conv1.weight = nn.Parameter(torch.randn_like(net.conv1.weight))
        assert_near(cm(x), net(x))
        net.conv2.weight.data = torch.randn_like(net.conv2.weight)  # same tensor, new memory
        assert_near(cm(x), net(x))


def test_inference_tensors_are_never_kept(dev="cpu"):
    """Parameters made under torch.inference_mode have no version counter:
    their convolutions take them as given, and an in-place update shows."""
    with torch.inference_mode():
        net, x = model(dev), X.to(dev)
        cm = ptc.compile(net)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback to torch ops
            cm(x)
            with ConvOps() as later:
                assert_near(cm(x), net(x))
            net.conv2.weight.mul_(-2)
            assert_near(cm(x), net(x))
    assert later.copies == 0 and later.weights == [False, False]


class ScalesItsWeight(ConvChain):
    """Writes a convolution weight in place inside the compiled graph, where
    the program's own write leaves the weight's version as it was."""

    def forward(self, x):
        self.conv2.weight.mul_(0.5)
        return super().forward(x)


def test_a_weight_the_graph_writes_is_never_kept(dev="cpu"):
    torch.manual_seed(0)
    # parameters that need no grad: the write is part of the graph
    net = ScalesItsWeight().eval().requires_grad_(False).to(dev)
    ref = ScalesItsWeight().eval().requires_grad_(False).to(dev)
    ref.load_state_dict(net.state_dict())
    cm, x = ptc.compile(net), X.to(dev)
    with torch.no_grad():
        for _ in range(3):
            assert_near(cm(x), ref(x))
    torch.testing.assert_close(net.conv2.weight, ref.conv2.weight)


def test_weight_cache_off_converts_weights_in_the_program(monkeypatch, dev="cpu"):
    monkeypatch.setenv("PTC_WEIGHT_CACHE", "0")
    converts_weights_in_the_program(dev)


def test_weight_cache_is_off_by_default(monkeypatch, dev="cpu"):
    """Unset, the cache is off: a write through .data moves no version
    counter and would leave a kept copy stale."""
    monkeypatch.delenv("PTC_WEIGHT_CACHE")
    converts_weights_in_the_program(dev)


def converts_weights_in_the_program(dev):
    """Without the cache the program's own kernel writes conv1's weight
    channels-last every call (layout.c), so torch's convolution copies
    nothing, and a write through .data is seen at once. On the CPU conv2
    writes the graph's output, contiguous, so its weight is handed as it
    is; on CUDA the kernel after it adds its bias (PTC_CONV_BIAS_EPILOGUE),
    so it writes a channels-last temporary and its weight is converted
    too."""
    net, x = model(dev), X.to(dev)
    cm = ptc.compile(net)
    with torch.no_grad():
        cm(x)
        with ConvOps() as later:
            got = cm(x)
        assert_near(got, net(x))
        net.conv1.weight.data.mul_(-1)
        assert_near(cm(x), net(x))
    assert later.copies == 0 and later.weights == [True, dev == "cuda"]


def test_training_graphs_keep_no_copies(monkeypatch, dev="cpu"):
    """A training step's weights change every step: nothing is kept; its
    forward converts conv1's weight (and on CUDA conv2's, as above) with a
    kernel of its own each step, as inference without the cache does."""
    monkeypatch.setenv("PTC_LAYOUT", "channels_last")
    net, x = model(dev).train(), X.to(dev)
    cm = ptc.compile(net)
    cm(x).sum().backward()
    with ConvOps() as later:
        cm(x).sum().backward()
    assert later.weights == [True, dev == "cuda"]
    assert later.copies == 0
