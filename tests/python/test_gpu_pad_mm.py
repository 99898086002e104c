"""test_pad_mm.py's runs on CUDA tensors (skipped without a GPU), where
padding is the default: the tiny GPT-2-like model's training step and the
copies at a graph's boundary equal eager, the logits keep eager's strides,
the gradient matmuls read the logits' gradient through padded rows, and a
matmul over a cast weight reads the rows its kernel adds.
Small inputs: seconds on an H100."""
import pytest

import test_pad_mm as cases
from gpucheck import require_gpu


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


def test_tiny_lm_training_with_padded_rows_equals_eager_cuda(capfd):
    cases.test_tiny_lm_training_with_padded_rows_equals_eager(None, capfd, "cuda")


def test_boundary_copies_equal_eager_cuda(tmp_path):
    cases.test_boundary_copies_on_the_cpu_equal_eager(None, tmp_path, "cuda")


def test_a_cast_weights_extra_rows_equal_eager_cuda(capfd):
    cases.test_a_cast_weights_extra_rows_on_the_cpu_equal_eager(None, capfd, "cuda")
