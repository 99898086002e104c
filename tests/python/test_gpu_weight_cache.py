"""test_weight_cache.py's cases on CUDA tensors (skipped without a GPU):
cuDNN's convolutions of channels-last inputs get the kept channels-last
weights, copied once and again after an in-place update, results equal to
eager's. A few seconds on an H100."""
import pytest
import torch

import ptc
import test_weight_cache as cases
from gpucheck import require_gpu


@pytest.fixture(autouse=True)
def _gpu(monkeypatch):
    require_gpu()
    monkeypatch.setenv("PTC_WEIGHT_CACHE", "1")  # opt-in
    monkeypatch.setenv("PTC_FOLD_CONV", "0")  # conv1's weight stays a graph input


def test_weights_are_copied_once_across_calls_cuda():
    cases.test_weights_are_copied_once_across_calls("cuda")


def test_an_in_place_update_of_a_weight_makes_a_new_copy_cuda():
    cases.test_an_in_place_update_of_a_weight_makes_a_new_copy("cuda")


def test_a_new_weight_tensor_makes_a_new_copy_cuda():
    cases.test_a_new_weight_tensor_makes_a_new_copy("cuda")


def test_inference_tensors_are_never_kept_cuda():
    cases.test_inference_tensors_are_never_kept("cuda")


def test_a_weight_the_graph_writes_is_never_kept_cuda():
    cases.test_a_weight_the_graph_writes_is_never_kept("cuda")


def test_weight_cache_off_converts_weights_in_the_program_cuda(monkeypatch):
    cases.test_weight_cache_off_converts_weights_in_the_program(monkeypatch, "cuda")


def test_weight_cache_is_off_by_default_cuda(monkeypatch):
    cases.test_weight_cache_is_off_by_default(monkeypatch, "cuda")


def test_training_graphs_keep_no_copies_cuda(monkeypatch):
    cases.test_training_graphs_keep_no_copies(monkeypatch, "cuda")


def test_recorded_cuda_graphs_read_the_weights_in_place():
    """reduce-overhead records the program into CUDA graphs, whose replays
    read the parameters where they are: the program keeps no copies, so an
    in-place update shows in the next replay."""
    net, x = cases.model("cuda"), cases.X.to("cuda")
    cm = ptc.compile(net, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            cm(x)
        net.conv2.weight.mul_(-2)
        cases.assert_near(cm(x), net(x))
        cases.assert_near(cm(x), net(x))
