"""What the compiled backward saves of the graph's own inputs.

A value the backward needs that is an input of the graph is saved as that
input, not returned by the forward as a copy: GPT-2's loss graph saved its
bf16 [rows, vocab] logits (206 MB at 16x128) through a copy kernel on every
step. Saved as the input itself, torch's saved-tensor checks still apply: an
in-place write to it before the backward is eager's error."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import ptc  # noqa: E402
from ptc._autograd import saved_values  # noqa: E402


@pytest.fixture(autouse=True)
def compiled_autograd():
    ptc.config.compiled_autograd = True
    ptc.reset()
    yield
    ptc.config.compiled_autograd = False


def loss(logits, y):
    return F.cross_entropy(logits.float(), y)


def inputs():
    torch.manual_seed(0)
    logits = torch.randn(64, 500).to(torch.bfloat16).requires_grad_()
    return logits, torch.randint(0, 500, (64,))


def test_a_saved_input_is_the_input_itself():
    logits, y = inputs()
    out = ptc.compile(loss, fullgraph=True)(logits, y)
    saved = saved_values(out.grad_fn)
    assert any(t.data_ptr() == logits.data_ptr() for t in saved), [t.shape for t in saved]
    assert not any(t.shape == logits.shape and t.data_ptr() != logits.data_ptr() for t in saved)


def test_gradients_equal_eager():
    logits, y = inputs()
    want_logits = logits.detach().clone().requires_grad_()
    loss(want_logits, y).backward()
    out = ptc.compile(loss, fullgraph=True)(logits, y)
    torch.testing.assert_close(out, loss(want_logits.detach(), y))
    out.backward()
    torch.testing.assert_close(logits.grad, want_logits.grad)


def test_writing_the_saved_input_before_backward_is_eagers_error():
    logits, y = inputs()
    leaf = logits.detach().clone().requires_grad_()
    x = leaf * 1  # not a leaf: in-place writes are allowed, then caught at backward
    out = ptc.compile(loss, fullgraph=True)(x, y)
    with torch.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()
