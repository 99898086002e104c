"""test_grad_layout.py's cases on CUDA tensors (skipped without a GPU):
after a compiled training step every .grad is strided as eager's and equals
it, also under mode="reduce-overhead", whose replayed backward's gradients
are copies of its static buffers. On CUDA a channels-last ResNet's 1x1
weight gradients are where eager and the contract part: cuDNN returns them
[C,1,1,1]-strided for a [C,1,C,C] parameter, which AccumulateGrad keeps (and
DDP's bucket view then warns of in eager); ptc's have the parameter's
strides (test_grad_layout.contract_strides). Without TF32, which rounds
channels-last and contiguous convolutions differently."""
import pytest
import torch

import test_grad_layout as cases
from gpucheck import require_gpu
from test_training import compiled_autograd  # noqa: F401 (autouse: the cases run ptc's backward)


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("fmt", sorted(cases.FORMATS))
def test_resnet_grads_are_strided_as_eager_cuda(fmt, mode):
    cases.test_resnet_grads_are_strided_as_eager(fmt, "cuda", steps=3, mode=mode)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("fmt", sorted(cases.FORMATS))
def test_ambiguous_transposed_and_expanded_parameters_cuda(fmt, mode):
    cases.test_ambiguous_transposed_and_expanded_parameters(fmt, "cuda", steps=3, mode=mode)
