"""test_layout.py's cases on CUDA tensors (skipped without a GPU): resnet's
convolutions read channels-last buffers with no copy between them, and
channels-last weights where ptc casts them under autocast; models
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


def test_outputs_keep_the_users_layout_cuda(tmp_path):
    cases.test_outputs_keep_the_users_layout_and_views_convert(tmp_path, "cuda")


def test_training_graphs_plan_layouts_cuda(tmp_path):
    cases.test_training_graphs_plan_layouts(tmp_path, None, "cuda")


def test_symbolic_batch_cuda():
    cases.test_symbolic_batch("cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool_is_pointwise_cuda(dtype, tmp_path):
    small.test_max_pool_is_pointwise_and_equals_eager(dtype, tmp_path, "cuda")
