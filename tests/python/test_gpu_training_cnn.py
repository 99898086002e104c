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
    # both gradients are one call of torch's convolution_backward (cuDNN), as eager's
    backward = "".join(p.read_text() for p in tmp_path.rglob("backward.ptir"))
    assert backward.count("= convolution_backward(") == 1, backward


def parameter_gradients(model, x, compile_it, dtype):
    import ptc
    model = copy.deepcopy(model)
    run = ptc.compile(model) if compile_it else model
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        run(x).float().pow(2).mean().backward()
    return {name: p.grad.double() for name, p in model.named_parameters()}, model


# Train-mode BatchNorm makes these gradients ill-conditioned: in float32 eager's
# own gradients are up to ~4% (TF32 off) or ~40% (TF32 on) of the largest
# value away from a float64 run's on an H100. So compiled and eager gradients
# are each judged against the float64 run, and the compiled ones may be at
# most a few times as far from it as eager's, parameter by parameter: an
# earlier check against eager itself read that rounding as a bug.
ERROR_FACTOR, ERROR_FLOOR = 3.0, {"fp32": 1e-5, "bf16": 1e-2}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_resnet18_train_mode_is_one_graph(dtype, monkeypatch):
    import ptc
    tv = pytest.importorskip("torchvision")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    torch.manual_seed(0)
    m = tv.models.resnet18(num_classes=10).cuda().train()
    x = torch.randn(16, 3, 64, 64, device="cuda")
    exact, _ = parameter_gradients(copy.deepcopy(m).double(), x.double(), False, "fp32")
    eager, eager_model = parameter_gradients(m, x, False, dtype)
    compiled, compiled_model = parameter_gradients(m, x, True, dtype)
    for name, ref in exact.items():
        scale = max(ref.abs().max().item(), 1e-30)
        eager_err = (eager[name] - ref).abs().max().item() / scale
        ptc_err = (compiled[name] - ref).abs().max().item() / scale
        assert ptc_err <= ERROR_FACTOR * eager_err + ERROR_FLOOR[dtype], (name, eager_err, ptc_err)
    for (name, b), c in zip(eager_model.named_buffers(), compiled_model.buffers()):
        assert close(c, b, TOL[dtype]), name
    m2 = copy.deepcopy(m)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        ex = ptc.explain(m2, backend="ptc")(x)
    assert (ex.graph_count, ex.break_count) == (1, 0), ex.breaks
    assert not ex.autograd_fallback, ex.fallbacks


def test_gpu_resnet18_adamw_steps_match_eager(monkeypatch):
    import ptc
    # TF32 (10-bit mantissas) rounds ptc's channels-last convolutions
    # (training graphs plan layouts) and eager's contiguous ones differently;
    # the losses were 1.3e-3 apart with them on, against a 1e-3 bound
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
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
