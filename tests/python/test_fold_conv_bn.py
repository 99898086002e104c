"""Eval BatchNorm folded into convolution weights (compiler/passes/fold_conv.c).

Under no_grad with the model in eval mode, a convolution followed by a
BatchNorm with running statistics (or a frozen BatchNorm written as
y * scale + shift) is one convolution of W * gamma / sqrt(var + eps) with
bias (b - mean) * gamma / sqrt(var + eps) + beta, computed in float32 from
the parameters of each call: no kernel reads a convolution's output to
normalise it, results equal eager's, and parameters changed between calls
are seen. PTC_FOLD_CONV=0 keeps the BatchNorm kernels, which shows the
counting can fail."""
import json
import os
import re

import pytest
import torch
import torch.nn as nn

import ptc

torchvision = pytest.importorskip("torchvision")


def traced_files(fn, args, tmp_path, autocast=False):
    """fn compiled and run under no_grad with tracing on: (result,
    captured.ptir, kernels.txt, metrics.json counts) of its one graph."""
    ptc.config.trace_dir = str(tmp_path)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            got = ptc.compile(fn)(*args)
    finally:
        ptc.config.trace_dir = None
    dirs = [d for d, _, files in os.walk(tmp_path) if "kernels.txt" in files]
    assert len(dirs) == 1, "expected one graph"
    read = lambda n: open(os.path.join(dirs[0], n)).read()  # noqa: E731
    return got, read("captured.ptir"), read("kernels.txt"), json.loads(read("metrics.json"))["counts"]


def batch_norm_kernels(captured, kernels):
    """Kernels that read a convolution's output and compute a captured
    batch_norm (their members' provenance)."""
    norms = set(re.findall(r"^  (%\d+) = batch_norm\(", captured, re.M))
    conv_outs = set(re.findall(r"^  n\d+ convolution\(.*-> (buf\d+)", kernels, re.M))
    found = []
    for block in re.split(r"^(?=kernel \d+ |extern \d+ |memory:)", kernels, flags=re.M):
        if not block.startswith("kernel "):
            continue
        provs = set(re.findall(r"%\d+", " ".join(re.findall(r"<- (.*)$", block, re.M))))
        loads = set(re.findall(r"load (buf\d+)\[", block))
        if provs & norms and loads & conv_outs:
            found.append(block.splitlines()[0])
    return found


def with_env(name, value):
    old = os.environ.get(name)
    os.environ[name] = value
    return old


def restore_env(name, old):
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old


def randomize_bn(model):
    """Running statistics and affine parameters away from their defaults,
    so that a fold that drops one of them shows."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


def timm_resnet18():
    timm = pytest.importorskip("timm")
    return timm.create_model("resnet18", pretrained=False)


MODELS = {
    "resnet18": lambda: torchvision.models.resnet18(),
    "mobilenet_v3_small": lambda: torchvision.models.mobilenet_v3_small(),
    "timm_resnet18": timm_resnet18,
}


def close(got, want, autocast, f32_tol=1e-4):
    tol = 3e-2 if autocast else f32_tol
    scale = want.float().abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= tol * max(scale, 1.0)


@pytest.mark.parametrize("autocast", [False, True], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_models_fold_every_batch_norm_and_equal_eager(name, autocast, tmp_path):
    torch.manual_seed(0)
    model = randomize_bn(MODELS[name]()).eval()
    x = torch.randn(2, 3, 64, 64)
    got, captured, kernels, counts = traced_files(model, (x,), tmp_path, autocast)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = model(x)
    close(got, want, autocast)
    norms = len(re.findall(r"= batch_norm\(", captured))
    assert norms > 0
    # and more: mobilenet's hardsigmoid adds 3 to its squeeze-excite convolution
    assert counts["conv_epilogues_folded"] >= norms
    assert batch_norm_kernels(captured, kernels) == []


def test_unfolded_batch_norms_are_kernels_after_their_convolutions(tmp_path):
    """PTC_FOLD_CONV=0: the count above sees every BatchNorm's kernel."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    old = with_env("PTC_FOLD_CONV", "0")
    try:
        got, captured, kernels, counts = traced_files(model, (torch.randn(1, 3, 64, 64),), tmp_path)
    finally:
        restore_env("PTC_FOLD_CONV", old)
    assert "conv_epilogues_folded" not in counts
    # 20 BatchNorms; each downsample's shares its block's residual add kernel
    assert len(batch_norm_kernels(captured, kernels)) == 17


def weight_copies(fn, x):
    """aten::clone calls of one call (torch.profiler): torch's convolutions
    copy a weight into their input's layout where it is not."""
    with torch.no_grad():
        fn(x)
        with torch.profiler.profile() as p:
            fn(x)
    return {e.key: e.count for e in p.key_averages()}.get("aten::clone", 0)


def test_folded_weights_arrive_in_the_convolutions_layout():
    """The fold writes each scaled weight channels-last, the layout of the
    convolution's input: torch's convolutions copy no weight. Without the
    fold they copy none either: the program converts each weight input
    with a kernel of its own (test_layout.py)."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 64, 64)
    old = with_env("PTC_FOLD_CONV", "0")
    try:
        unfolded = ptc.compile(torchvision.models.resnet18().eval())
        unfolded_copies = weight_copies(unfolded, x)
    finally:
        restore_env("PTC_FOLD_CONV", old)
    assert unfolded_copies == 0
    assert weight_copies(ptc.compile(torchvision.models.resnet18().eval()), x) == 0


class ConvBN(nn.Module):
    def __init__(self, bias=False):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def test_parameters_changed_in_place_between_calls_are_seen():
    """The folded weight comes from each call's parameters: in-place writes
    to the BatchNorm's statistics and affine parameters, the convolution's
    weight and a load_state_dict between calls all show in the result."""
    torch.manual_seed(0)
    model = randomize_bn(ConvBN(bias=True)).eval()
    compiled = ptc.compile(model)
    x = torch.randn(2, 3, 16, 16)
    changes = [
        lambda: model.bn.running_mean.add_(0.5),
        lambda: model.bn.running_var.mul_(3.0),
        lambda: model.bn.weight.mul_(-2.0),
        lambda: model.bn.bias.sub_(1.0),
        lambda: model.conv.weight.mul_(0.5),
        lambda: model.conv.bias.add_(0.25),
        lambda: model.bn.running_mean.data.add_(1.0),  # bypasses the version counter
        lambda: model.load_state_dict(randomize_bn(ConvBN(bias=True)).state_dict()),
    ]
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        for change in changes:
            change()
            torch.testing.assert_close(compiled(x), model(x))


def test_train_then_eval_sees_the_updated_statistics():
    """A training step updates the running statistics in place; back in eval,
    the compiled model uses the new ones."""
    torch.manual_seed(0)
    model = ConvBN().eval()
    compiled = ptc.compile(model)
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        compiled(x)
        model.train()
        model(x * 3 + 1)  # eager: updates running_mean and running_var
        model.eval()
        torch.testing.assert_close(compiled(x), model(x))


def test_training_mode_batch_norm_is_not_folded(tmp_path):
    torch.manual_seed(0)
    model = ConvBN().train()
    ref = ConvBN().train()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 3, 16, 16)
    got, captured, kernels, counts = traced_files(model, (x,), tmp_path)
    with torch.no_grad():
        want = ref(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(model.bn.running_mean, ref.bn.running_mean)
    assert counts.get("conv_epilogues_folded", 0) == 0


class RawOutputUsedToo(nn.Module):
    """The convolution's raw output feeds the BatchNorm and another op."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y.mean(dim=(2, 3), keepdim=True)


def test_convolution_output_used_elsewhere_keeps_both(tmp_path):
    torch.manual_seed(0)
    model = randomize_bn(RawOutputUsedToo()).eval()
    x = torch.randn(2, 3, 16, 16)
    got, captured, kernels, counts = traced_files(model, (x,), tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x))
    assert counts.get("conv_epilogues_folded", 0) == 0
    assert len(batch_norm_kernels(captured, kernels)) == 1


class FrozenForms(nn.Module):
    """torchvision's FrozenBatchNorm2d (y * scale + shift in float32 from
    [1, C, 1, 1] parameters), and affine steps of every kind: neg, sub from
    a constant, division by a per-channel value, a scalar."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torchvision.ops.misc.FrozenBatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=4, bias=False)
        self.d = nn.Parameter(torch.rand(8, 1, 1) + 0.5)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return 1.5 - (-self.conv2(y) / self.d) * 2.0


@pytest.mark.parametrize("autocast", [False, True], ids=["f32", "bf16"])
def test_frozen_batch_norm_and_other_affine_steps_fold(autocast, tmp_path):
    torch.manual_seed(0)
    model = FrozenForms().eval()
    with torch.no_grad():
        model.bn1.running_var.uniform_(0.5, 1.5)
        model.bn1.running_mean.normal_(0, 0.1)
        model.bn1.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 16, 16)
    got, captured, kernels, counts = traced_files(model, (x,), tmp_path, autocast)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = model(x)
    assert got.dtype == want.dtype
    close(got, want, autocast)
    assert counts["conv_epilogues_folded"] == 2


class NotAffine(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(3, 8, 3, padding=1)
        self.s = nn.Parameter(torch.rand(8, 1, 1) + 0.5)
        with torch.no_grad():  # conv1's outputs far from 0: s / conv1(x) well conditioned
            self.conv1.bias.fill_(8.0)

    def forward(self, x):
        return self.s / self.conv1(x) + self.conv2(x) * x.mean(dim=1, keepdim=True)


def test_steps_that_are_not_per_channel_affine_are_kept(tmp_path):
    """c / y is not affine in y, and a factor that varies over the spatial
    dims is not per channel."""
    torch.manual_seed(0)
    model = NotAffine().eval()
    x = torch.randn(2, 3, 16, 16)
    got, captured, kernels, counts = traced_files(model, (x,), tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x))
    assert counts.get("conv_epilogues_folded", 0) == 0


def test_symbolic_batch_and_inference_mode(tmp_path):
    """Folds under dynamic shapes (a symbolic batch) and under
    torch.inference_mode as under no_grad."""
    torch.manual_seed(0)
    model = randomize_bn(ConvBN(bias=True)).eval()
    compiled = ptc.compile(model, dynamic=True)
    ptc.config.trace_dir = str(tmp_path)
    try:
        with torch.inference_mode():
            for batch in (2, 3, 5):
                x = torch.randn(batch, 3, 16, 16)
                torch.testing.assert_close(compiled(x), model(x))
    finally:
        ptc.config.trace_dir = None
    folds = [json.load(open(os.path.join(d, "metrics.json")))["counts"]["conv_epilogues_folded"]
             for d, _, files in os.walk(tmp_path) if "metrics.json" in files]
    captured = [open(os.path.join(d, "captured.ptir")).read()
                for d, _, files in os.walk(tmp_path) if "captured.ptir" in files]
    assert folds and all(n == 1 for n in folds)
    assert any(re.search(r"%x: f32\[s\d+,", c) for c in captured)


def cuda_plan(captured, tmp_path, env):
    """ptc-run's CUDA plan (kernels.txt text) of a graph captured on the CPU,
    under the environment variables env (None: unset)."""
    from ptcio import ptc_run, ptir_on_cuda
    graph = tmp_path / "cuda.ptir"
    graph.write_text(ptir_on_cuda(captured))
    old = {k: with_env(k, v) if v is not None else os.environ.pop(k, None) for k, v in env.items()}
    try:
        r = ptc_run("--emit=kernels", "--backend", "cuda", "--cuda-arch", "sm_90", str(graph))
    finally:
        for k, v in old.items():
            restore_env(k, v)
    if "not part of this build" in r.stderr:
        pytest.skip("the CUDA backend is not part of this build")
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout



@pytest.mark.parametrize("fold", [None, "0"], ids=["default", "PTC_FOLD_CONV=0"])
def test_the_cuda_backend_folds_unless_told_not_to(tmp_path, fold):
    """On CUDA too the fold is on by default (with its biases added by the
    next kernel it made resnet50 fp32 faster on an H200); PTC_FOLD_CONV=0
    turns it off. The CUDA plan of resnet18's captured graph, made without
    a GPU by ptc-run; the folded biases stay in the convolutions
    (PTC_CONV_BIAS_EPILOGUE=0), so that no kernel after them has a
    BatchNorm's provenance."""
    model = randomize_bn(torchvision.models.resnet18().eval())
    _, captured, _, _ = traced_files(model, (torch.randn(1, 3, 64, 64),), tmp_path)
    kernels = cuda_plan(captured, tmp_path, {"PTC_FOLD_CONV": fold, "PTC_CONV_BIAS_EPILOGUE": "0"})
    found = batch_norm_kernels(captured, kernels)
    assert (len(found) == 0) == (fold is None), found


class BiasedConvs(nn.Module):
    """Convolutions with biases, one per kind of consumer: a relu, a
    depthwise convolution (an extern), the graph's output."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 7, padding=3, groups=8)
        self.b = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.b(self.dw(torch.relu(self.a(x))))


def extern_biases(kernels):
    """The bias operand of each convolution extern of a plan."""
    return re.findall(r"^  n\d+ convolution\(.*, (None|buf\d+\[\d+\]\{1\})\) -> ", kernels, re.M)


@pytest.mark.parametrize("switch", [None, "0"], ids=["default", "PTC_CONV_BIAS_EPILOGUE=0"])
def test_cuda_convolutions_leave_their_bias_to_the_next_kernel(tmp_path, switch):
    """torch's CUDA convolution adds its bias in a kernel of its own; ptc
    hands the convolution no bias and adds it in the kernel after it (the
    relu's), as Inductor does. On the CPU (oneDNN adds it within the
    convolution) and with PTC_CONV_BIAS_EPILOGUE=0 the biases stay."""
    model = BiasedConvs().eval()
    x = torch.randn(2, 3, 16, 16)
    got, captured, cpu_kernels, _ = traced_files(model, (x,), tmp_path)
    close(got, model(x), False)
    assert extern_biases(cpu_kernels) and "None" not in extern_biases(cpu_kernels)
    kernels = cuda_plan(captured, tmp_path, {"PTC_CONV_BIAS_EPILOGUE": switch})
    biases = extern_biases(kernels)
    assert len(biases) == 3
    assert all(b == "None" for b in biases) == (switch is None), biases
    assert all(b != "None" for b in biases) == (switch == "0"), biases


def test_cuda_fold_leaves_the_folded_bias_to_the_next_kernel(tmp_path):
    """On CUDA every folded convolution has a bias,
    which torch used to add in 53 kernels of its own in resnet50 (1.06 ms
    of 3.85 at batch 32 on an H200): the bias goes to the next kernel."""
    model = randomize_bn(torchvision.models.resnet18().eval())
    _, captured, _, _ = traced_files(model, (torch.randn(1, 3, 64, 64),), tmp_path)
    biases = extern_biases(cuda_plan(captured, tmp_path, {"PTC_FOLD_CONV": None,
                                                           "PTC_CONV_BIAS_EPILOGUE": None}))
    assert len(biases) == 20 and all(b == "None" for b in biases), biases


@pytest.mark.parametrize("fold", ["0", "1"])
@pytest.mark.parametrize("autocast", [False, True], ids=["f32", "bf16"])
def test_on_cuda_biases_added_after_equal_eager(fold, autocast):
    from gpucheck import cuda_reason
    reason = cuda_reason()
    if reason:
        pytest.skip(reason)
    old = with_env("PTC_FOLD_CONV", fold)
    try:
        for model, shape in ((BiasedConvs(), (2, 3, 16, 16)),
                             (randomize_bn(torchvision.models.resnet18()), (2, 3, 64, 64))):
            model = model.eval().cuda()
            x = torch.randn(*shape, device="cuda")
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                # cuDNN's float32 convolutions run in TF32 (torch's default),
                # by algorithms that differ between layouts
                close(ptc.compile(model)(x), model(x), autocast, f32_tol=2e-3)
    finally:
        restore_env("PTC_FOLD_CONV", old)
