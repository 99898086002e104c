"""test_cpu_externs.py's cases on CUDA tensors (skipped without a GPU): extern
results kept as the run's buffers (the helper both executors share), no copy
after a convolution, eager's results over repeated calls."""
import pytest

import test_cpu_externs as cases
from gpucheck import require_gpu


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


def test_conv_results_are_not_copied_cuda():
    cases.test_conv_results_are_not_copied("cuda")


def test_attention_and_conv_results_match_across_calls_cuda():
    cases.test_attention_and_conv_results_match_across_calls("cuda")
