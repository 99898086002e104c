"""The compiled backward of softmax, log_softmax, logsumexp and cross_entropy on
CUDA (test_training_softmax.py's CPU cases): no gradient through the max
shift, and cross_entropy's pick of the target differentiated as a one-hot
where, not a scatter into zeros. Against eager, in fp32 and bf16 autocast
(GPT-2's loss: float32 log_softmax of bf16 logits). Skips without a GPU."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

pytestmark = pytest.mark.usefixtures("cuda_compiled_autograd")

FNS = {
    "softmax": lambda x: F.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, 0),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
}


def run(f, x, *rest, compiled):
    import ptc
    x = x.detach().clone().requires_grad_()
    out = (ptc.compile(f, fullgraph=True) if compiled else f)(x, *rest)
    if compiled:
        assert type(out.grad_fn).__name__ == "CompiledFunctionBackward", out.grad_fn
    out.backward()
    return out.detach().float(), x.grad.float()


@pytest.mark.parametrize("name", sorted(FNS))
def test_fp32_gradients_equal_eager(name):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(48, 300, device="cuda", generator=gen) * 3
    x[:, 7] = x[:, 5]  # ties in the max
    x[3, ::4] = float("-inf")  # masked entries
    y = FNS[name](x)
    w = torch.where(torch.isinf(y), 0.0, torch.randn(y.shape, device="cuda", generator=gen))

    def f(x, w):
        y = FNS[name](x)
        return torch.where(torch.isinf(y), torch.zeros_like(y), y * w).sum()

    got, gx = run(f, x, w, compiled=True)
    want, wx = run(f, x, w, compiled=False)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(gx, wx, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_of_logits_equals_eager(dtype):
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = (torch.randn(256, 5000, device="cuda", generator=gen) * 4).to(dtype)
    y = torch.randint(0, 5000, (256,), device="cuda", generator=gen)
    y[::7] = -100

    def f(x, y):
        return F.cross_entropy(x.float(), y)

    got, gx = run(f, x, y, compiled=True)
    want, wx = run(f, x, y, compiled=False)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(gx, wx, rtol=tol, atol=tol * wx.abs().max().item())
