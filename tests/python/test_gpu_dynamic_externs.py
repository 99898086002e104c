"""Externs with symbolic arguments on CUDA (skipped without a GPU): a
convolution whose padding and stride come from the input's length runs
through torch's CUDA kernel with the arguments evaluated per call — one
symbolic compile, no static fallback (test_dynamic_externs.py on the CPU)."""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import ptc  # noqa: E402


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    ptc.reset()


def events(compiled, kind):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e for e in handle._events() if e["kind"] == kind]


def conv_from_length(x, w):
    L = x.size(-1)
    return torch.relu(F.conv1d(x, w, padding=L // 4 + 1, stride=L // 8 + 1))


def test_conv_size_arguments_on_cuda():
    w = torch.randn(4, 3, 3, device="cuda")
    c = ptc.compile(conv_from_length)
    for L in (8, 12, 20, 33, 64):
        x = torch.randn(2, 3, L, device="cuda")
        torch.testing.assert_close(c(x, w), conv_from_length(x, w), rtol=1e-4, atol=1e-4)
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert len(events(c, "compile")) == 2, [e["reason"] for e in events(c, "compile")]
