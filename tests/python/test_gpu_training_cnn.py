"""CNN training on CUDA (the CPU side is test_training_cnn.py): BatchNorm in
train mode inside one compiled graph (running statistics written back after
it), the convolution's weight gradient through torch's convolution_backward
(cuDNN), and resnet18 training steps against eager, fp32 and bf16 autocast.
Skips without a GPU."""
import copy

import pytest

torch = pytest.importorskip("torch")

TOL = {"fp32": 2e-3, "bf16": 3e-2}


pytestmark = pytest.mark.usefixtures("cuda_compiled_autograd")


def close(a, b, tol):
    scale = max(b.float().abs().max().item(), 1e-6)
    return (a.float() - b.float()).abs().max().item() <= tol * scale


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 1, 1, 1), (2, 0, 1, 1), ((2, 1), (1, 2), (2, 1), 2), (1, 1, 1, 8)])
def test_gpu_conv_gradients(stride, padding, dilation, groups, tmp_path, monkeypatch):
    import ptc
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 16, 3, stride=stride, padding=padding, dilation=dilation,
                           groups=groups).cuda()
    conv2 = copy.deepcopy(conv)
    x = torch.randn(4, 8, 17, 15, device="cuda")
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn_like(conv(x))
    (conv(xe) * g).sum().backward()
    monkeypatch.setenv("PTC_TRACE_DIR", str(tmp_path))
    (ptc.compile(conv2)(xc) * g).sum().backward()
    assert close(xc.grad, xe.grad, TOL["fp32"])
    assert close(conv2.weight.grad, conv.weight.grad, TOL["fp32"])
    assert close(conv2.bias.grad, conv.bias.grad, TOL["fp32"])
    backward = "".join(p.read_text() for p in tmp_path.rglob("backward.ptir"))
    assert "convolution_backward_weight(" in backward


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_resnet18_train_mode_is_one_graph(dtype):
    import ptc
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = tv.models.resnet18(num_classes=10).cuda().train()
    m2 = copy.deepcopy(m)
    x = torch.randn(16, 3, 64, 64, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        m(x).float().pow(2).mean().backward()
        ptc.compile(m2)(x).float().pow(2).mean().backward()
    for (name, p), q in zip(m.named_parameters(), m2.parameters()):
        assert close(q.grad, p.grad, TOL[dtype]), name
    for (name, b), c in zip(m.named_buffers(), m2.buffers()):
        assert close(c, b, TOL[dtype]), name
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        ex = ptc.explain(m2, backend="ptc")(x)
    assert (ex.graph_count, ex.break_count) == (1, 0), ex.breaks
    # Its compiled backward came out about 8% off eager's on an H100 (while the
    # CPU's matches): until the cause is found the graph runs through torch
    # ops, and says so (capture/backend/backend.c, cuda_batch_norm_training).
    assert ex.autograd_fallback
    assert any("BatchNorm in train mode on CUDA" in f.get("why", "") for f in ex.fallbacks)


def test_gpu_resnet18_adamw_steps_match_eager():
    import ptc
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    eager = tv.models.resnet18(num_classes=10).cuda().train()
    comp = copy.deepcopy(eager)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-4)
    opt_c = torch.optim.AdamW(comp.parameters(), lr=1e-4)
    compiled = ptc.compile(comp)
    g = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(5):
        x = torch.randn(16, 3, 64, 64, device="cuda", generator=g)
        y = torch.randint(0, 10, (16,), device="cuda", generator=g)
        losses = []
        for m, opt in ((eager, opt_e), (compiled, opt_c)):
            loss = torch.nn.functional.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-3 * max(1.0, abs(losses[0])), losses
    # five AdamW steps compound cuDNN's and ptc's rounding: the running
    # statistics (a mean over the steps' batches) drift apart by ~3e-3 of
    # their largest value on an H100 while every loss matches within 1e-3
    for (name, b), c in zip(eager.named_buffers(), comp.buffers()):
        assert close(c, b, 1e-2), name
