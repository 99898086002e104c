"""test_layout.py's cases on CUDA tensors (skipped without a GPU): resnet's
convolutions read channels-last buffers with no copy between them, and
channels-last weights where ptc casts them under autocast or converts
weight inputs; models
in fp32 and bf16 equal eager, outputs keep the user's layout, a symbolic
batch; max_pool2d unrolled into a pointwise kernel equals eager with NaN and
infinities. Small inputs: a few seconds on an H100."""
import pytest
import torch

import test_layout as cases
import test_small_reductions as small
from gpucheck import require_gpu


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


def test_resnet_convolutions_read_channels_last_cuda(tmp_path):
    cases.test_resnet_convolutions_read_channels_last_with_no_copy_between(tmp_path, "cuda")


@pytest.mark.parametrize("name,dtype", [
    ("resnet18", torch.float32), ("resnet18", torch.bfloat16),
    ("mobilenet_v3_small", torch.bfloat16), ("convnext_tiny", torch.bfloat16),
])
def test_models_equal_eager_cuda(name, dtype, tmp_path):
    cases.test_models_equal_eager(name, dtype, tmp_path, "cuda")


def test_weights_cast_under_autocast_are_written_channels_last_cuda(tmp_path):
    cases.test_weights_cast_under_autocast_are_written_channels_last(tmp_path, "cuda")


def test_weight_inputs_are_converted_by_the_program_cuda(tmp_path, monkeypatch):
    cases.test_weight_inputs_are_converted_by_the_program(tmp_path, monkeypatch, "cuda")


def test_outputs_keep_the_users_layout_cuda(tmp_path):
    cases.test_outputs_keep_the_users_layout_and_views_convert(tmp_path, "cuda")


def test_training_graphs_plan_layouts_cuda(tmp_path):
    cases.test_training_graphs_plan_layouts(tmp_path, None, "cuda")


def test_symbolic_batch_cuda():
    cases.test_symbolic_batch("cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool_is_pointwise_cuda(dtype, tmp_path):
    small.test_max_pool_is_pointwise_and_equals_eager(dtype, tmp_path, "cuda")


def test_saved_convolution_results_are_torchs_tensors_cuda():
    """A CUDA training forward's convolution results, saved for the backward
    (graph outputs), are the tensors torch's convolution returned: the CUDA
    runtime copied each into a tensor it allocated (a Memcpy DtoD per saved
    convolution result, 53 in a resnet50 training forward), where the CPU's
    hands them over."""
    nn = torch.nn
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)).cuda().train()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    import ptc
    compiled = ptc.compile(m)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        compiled(x).float().sum().backward()  # compiles
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            out = compiled(x)
            torch.cuda.synchronize()
    copies = [e.name for e in prof.events() if e.name in ("aten::copy_", "Memcpy DtoD (Device -> Device)")]
    assert copies == [], copies
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ref = m(x)
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
