"""Kept channels-last copies of convolution weights
(compiler/capture/backend/weight_cache.c): an inference program whose
convolutions read channels-last inputs hands them channels-last weights,
copied once and kept while each weight is the same tensor at the same
version, instead of torch's convolution copying each weight into that layout
on every call. An in-place write to a weight makes a new copy on the next
call; results equal eager's throughout."""
import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import ptc


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


def model():
    torch.manual_seed(0)
    return ConvChain().eval()


X = torch.randn(2, 3, 12, 12)


def test_weights_are_copied_once_across_calls():
    net = model()
    cm = ptc.compile(net)
    with torch.no_grad():
        with ConvOps() as first:
            cm(X)
        with ConvOps() as later:
            got = cm(X)
            cm(X)
        want = net(X)
    assert first.copies == 2 and first.weights == [True, True]
    assert later.copies == 0, "the kept copies were not reused"
    assert later.weights == [True] * 4
    torch.testing.assert_close(got, want)


def test_an_in_place_update_of_a_weight_makes_a_new_copy():
    net = model()
    cm = ptc.compile(net)
    with torch.no_grad():
        cm(X)
        cm(X)
        net.conv2.weight.mul_(-2)  # its _version moves on
        with ConvOps() as after:
            got = cm(X)
        torch.testing.assert_close(got, net(X))
        net.conv1.weight[0].zero_()  # through a view: the same version counter
        torch.testing.assert_close(cm(X), net(X))
        with ConvOps() as later:
            torch.testing.assert_close(cm(X), net(X))
    assert after.copies == 1 and after.weights == [True, True]
    assert later.copies == 0


def test_a_new_weight_tensor_makes_a_new_copy():
    net = model()
    cm = ptc.compile(net)
    with torch.no_grad():
        cm(X)
        net.conv1.weight = nn.Parameter(torch.randn_like(net.conv1.weight))
        torch.testing.assert_close(cm(X), net(X))
        net.conv2.weight.data = torch.randn_like(net.conv2.weight)  # same tensor, new memory
        torch.testing.assert_close(cm(X), net(X))


class ScalesItsWeight(ConvChain):
    """Writes a convolution weight in place inside the compiled graph, where
    the program's own write leaves the weight's version as it was."""

    def forward(self, x):
        self.conv2.weight.mul_(0.5)
        return super().forward(x)


def test_a_weight_the_graph_writes_is_never_kept():
    torch.manual_seed(0)
    # parameters that need no grad: the write is part of the graph
    net = ScalesItsWeight().eval().requires_grad_(False)
    ref = ScalesItsWeight().eval().requires_grad_(False)
    ref.load_state_dict(net.state_dict())
    cm = ptc.compile(net)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(cm(X), ref(X))
    torch.testing.assert_close(net.conv2.weight, ref.conv2.weight)


def test_weight_cache_off_hands_weights_as_they_are(monkeypatch):
    monkeypatch.setenv("PTC_WEIGHT_CACHE", "0")
    net = model()
    cm = ptc.compile(net)
    with torch.no_grad():
        cm(X)
        with ConvOps() as later:
            got = cm(X)
        torch.testing.assert_close(got, net(X))
    assert later.copies == 0 and later.weights == [False, False]


def test_training_graphs_keep_no_copies(monkeypatch):
    """A training step's weights change every step: its forward's
    convolutions take them as given, even where they read channels-last
    inputs."""
    monkeypatch.setenv("PTC_LAYOUT", "channels_last")
    net = model().train()
    cm = ptc.compile(net)
    cm(X).sum().backward()
    with ConvOps() as later:
        cm(X).sum().backward()
    assert later.weights and not any(later.weights)
    assert later.copies == 0
