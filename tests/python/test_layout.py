"""Layout planning (compiler/lower/layout.c): the temporaries of convolution
chains are stored channels-last, so torch's convolutions read and write
channels-last tensors and the kernels between them iterate in that order,
with one conversion at the graph's input and none between convolutions.
Results equal eager's; graph inputs and outputs keep the user's layout."""
import os
import re

import pytest
import torch
import torch.nn.functional as F

import ptc

torchvision = pytest.importorskip("torchvision")


def compile_traced(fn, args, tmp_path, **kw):
    """fn compiled and run on args with tracing on: (result, kernels.txt)."""
    ptc.config.trace_dir = str(tmp_path)
    try:
        with torch.no_grad():
            got = ptc.compile(fn, **kw)(*args)
    finally:
        ptc.config.trace_dir = None
    texts = [open(os.path.join(d, n)).read() for d, _, files in os.walk(tmp_path) for n in files
             if n == "kernels.txt"]
    assert len(texts) == 1, "expected one graph"
    return got, texts[0]


CONV = re.compile(r"^  n\d+ convolution\((buf\d+)\[([^\]]*)\]\{([^}]*)\}", re.M)


WEIGHT = re.compile(r"^  n\d+ convolution\(buf\d+\[[^\]]*\]\{[^}]*\}, "
                    r"buf\d+\[([^\]]*)\]\{([^}]*)\}", re.M)


def conv_weights(kernels):
    """(sizes, strides) of each convolution's weight, in program order."""
    return [([int(v) for v in m.group(1).split(",")], [int(v) for v in m.group(2).split(",")])
            for m in WEIGHT.finditer(kernels)]


def conv_inputs(kernels):
    """(sizes, strides) of each convolution's input, in program order."""
    return [([int(v) for v in m.group(2).split(",")], [int(v) for v in m.group(3).split(",")])
            for m in CONV.finditer(kernels)]


def steps(kernels):
    """Kernel names and "extern <op>" in program order."""
    return re.findall(r"^kernel \d+ (\S+):|^extern \d+ (\S+):", kernels, re.M)


def is_channels_last(sizes, strides):
    n, c, h, w = sizes
    want = [h * w * c, 1, w * c, c]
    return all(s == 1 or st == ws for s, st, ws in zip(sizes, strides, want))


def resnet18(dev="cpu"):
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval().to(dev)


# fp32 on CUDA: cuDNN's TF32 convolutions, another algorithm for each layout
TOL = {("cpu", torch.float32): 1e-4, ("cuda", torch.float32): 5e-3,
       ("cpu", torch.bfloat16): 3e-2, ("cuda", torch.bfloat16): 3e-2}


def assert_near(got, want, dev, dtype=torch.float32):
    """Equal within the dtype's tolerance, relative to the largest value."""
    scale = max(want.float().abs().max().item(), 1e-30)
    err = (got.float() - want.float()).abs().max().item()
    assert err <= TOL[dev, dtype] * scale, (err, scale)


def traced_resnet18(tmp_path, dev, size):
    """resnet18 compiled and run on a batch of 2 with tracing on, its result
    checked against eager's: (model, input, kernels.txt)."""
    model = resnet18(dev)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0)).to(dev)
    got, kernels = compile_traced(model, (x,), tmp_path)
    with torch.no_grad():
        assert_near(got, model(x), dev)
    return model, x, kernels


def test_resnet_convolutions_read_channels_last_with_no_copy_between(tmp_path, dev="cpu"):
    _, _, kernels = traced_resnet18(tmp_path, dev, 64)
    convs = conv_inputs(kernels)
    assert len(convs) == 20, kernels
    for sizes, strides in convs:
        assert is_channels_last(sizes, strides), (sizes, strides)
    # one conversion (the graph's input, before the first convolution) and no
    # copy kernel once the convolutions have started (the kernels before the
    # first convolution are that conversion and the folded BatchNorm weights)
    order = steps(kernels)
    first_conv = next(i for i, (k, x) in enumerate(order) if x == "convolution")
    copies = [k for k, _ in order if k and ("copy" in k or "channels_last" in k)]
    assert len(copies) == 1 and order.index((copies[0], "")) < first_conv, order
    assert "# layout: " in kernels and "channels-last" in kernels


def test_input_planes_copy_channels_last_along_the_long_dim(tmp_path):
    """The channels-last copy of a 3-plane image input runs its vector loop
    along the long height x width dim (contiguous loads), not along the 3
    channels (a 3-lane gather per pixel): the short loop goes outward."""
    w1 = torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(1))
    w2 = torch.randn(8, 8, 3, 3, generator=torch.Generator().manual_seed(2))

    def f(x):
        return F.conv2d(F.conv2d(x, w1, None, 1, 1).relu(), w2, None, 1, 1)

    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    got, kernels = compile_traced(f, (x,), tmp_path)
    assert_near(got, f(x), "cpu")
    copy = kernels[kernels.index("k0_to_channels_last"):]
    assert re.search(r"outer \[o0 < 2, o1 < 3, o2 < 1024\]", copy.split("extern")[0]), copy


def test_channels_last_average_pool_runs_lanes_along_channels(tmp_path):
    """A squeeze-and-excitation block's average pool over a channels-last
    buffer (a kernel reducing rows of channels, fused after the activation
    that writes them) runs its lanes along the contiguous channels, not
    along the rows (a gather of one lane per row): its code has no gather.
    Results equal eager's."""
    torch.manual_seed(0)
    conv1, conv2 = torch.nn.Conv2d(3, 48, 3, padding=1), torch.nn.Conv2d(48, 48, 1)
    bn = torch.nn.BatchNorm2d(48).eval()

    def f(x):
        y = F.hardswish(bn(conv1(x)))
        s = torch.sigmoid(F.adaptive_avg_pool2d(y, 1))
        return conv2(y * s)

    # batch 8: the pool is fused after the activation, one image per task
    x = torch.randn(8, 3, 14, 14)
    with torch.no_grad():
        got, kernels = compile_traced(f, (x,), tmp_path)
        assert_near(got, f(x), "cpu")
    pool = re.search(r"^kernel (\d+) \S*adaptive_pool", kernels, re.M)
    assert pool, kernels
    ll = [os.path.join(d, "kernel_%s.ll" % pool.group(1)) for d, _, files in os.walk(tmp_path)
          if "kernel_%s.ll" % pool.group(1) in files]
    assert len(ll) == 1
    assert "masked.gather.v" not in open(ll[0]).read()


def test_weights_cast_under_autocast_are_written_channels_last(tmp_path, dev="cpu"):
    """A convolution weight ptc writes (its bfloat16 cast under autocast) is
    written channels-last, as its convolution's input is: torch's
    convolution would copy a contiguous one into that layout every call."""
    model = resnet18(dev)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)).to(dev)
    with torch.autocast(dev, dtype=torch.bfloat16):
        got, kernels = compile_traced(model, (x,), tmp_path)
        with torch.no_grad():
            want = model(x)
    weights = conv_weights(kernels)
    assert len(weights) == 20, kernels
    for sizes, strides in weights:
        assert is_channels_last(sizes, strides), (sizes, strides)
    assert_near(got, want, dev, torch.bfloat16)


def weight_conversions(kernels):
    return re.findall(r"^kernel \d+ \S*weight_to_channels_last", kernels, re.M)


def test_weight_inputs_are_converted_by_the_program(tmp_path, monkeypatch, dev="cpu"):
    """A contiguous weight that is a graph input (BatchNorm not folded into
    it) is written channels-last by a kernel of the program just before its
    convolution, which the kernel before it may share a launch with; torch's
    convolution then copies no weight into its input's layout (it did, one
    aten::clone a convolution, before)."""
    monkeypatch.setenv("PTC_FOLD_CONV", "0")
    model, x, kernels = traced_resnet18(tmp_path, dev, 32)
    weights = conv_weights(kernels)
    assert len(weights) == 20
    for sizes, strides in weights:
        assert is_channels_last(sizes, strides), (sizes, strides)
    spatial = [sz for sz, _ in weights if sz[2] * sz[3] > 1]
    assert len(weight_conversions(kernels)) == len(spatial) == 17, kernels[:2000]
    compiled = ptc.compile(model)
    with torch.no_grad():
        compiled(x)
        with torch.profiler.profile() as prof:
            compiled(x)
    assert not [e for e in prof.events() if e.name == "aten::clone"]


def test_cuda_weight_conversions_share_the_launch_before_them(tmp_path):
    """On CUDA each weight conversion runs in one launch with the kernel
    before its convolution (a horizontal combination): no launch is added
    for it. The CUDA plan of resnet18's captured graph, made without a GPU
    by ptc-run."""
    from test_fold_conv_bn import cuda_plan, traced_files
    model = resnet18()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PTC_FOLD_CONV", "0")
        _, captured, _, _ = traced_files(model, (torch.randn(1, 3, 64, 64),), tmp_path)
    kernels = cuda_plan(captured, tmp_path, {"PTC_FOLD_CONV": "0"})
    converts = re.findall(r"^kernel (\d+) \S*weight_to_channels_last", kernels, re.M)
    combined = set(" ".join(re.findall(r"^combo \d+: \d+ kernels, one launch: ([\d ]+)$",
                                        kernels, re.M)).split())
    assert len(converts) == 17 and set(converts) <= combined, kernels[:3000]


def test_a_weight_two_convolutions_read_is_converted_once(tmp_path):
    """A convolution applied twice in one graph (a siamese pair) converts
    its weight once, before the first application."""
    torch.manual_seed(5)
    conv = torch.nn.Conv2d(8, 8, 3, padding=1)
    w1 = torch.randn(8, 3, 3, 3)

    def f(x):
        h = F.conv2d(x, w1, padding=1).relu()
        return conv(conv(h).relu()).relu() + 1

    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        got, kernels = compile_traced(f, (x,), tmp_path)
        assert_near(got, f(x), "cpu")
    assert len(weight_conversions(kernels)) == 2, kernels[:3000]  # w1 and conv's weight


def test_weights_already_channels_last_or_alike_either_way_are_not_copied(tmp_path, monkeypatch):
    """A module made channels-last by the user hands its weights as they
    are; so do 1x1 and depthwise weights, whose contiguous memory is already
    channels-last."""
    monkeypatch.setenv("PTC_FOLD_CONV", "0")
    model = resnet18().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    got, kernels = compile_traced(model, (x,), tmp_path / "cl")
    with torch.no_grad():
        assert_near(got, model(x), "cpu")
    assert not weight_conversions(kernels)
    torch.manual_seed(4)
    w1, dw, pw = torch.randn(8, 3, 3, 3), torch.randn(8, 1, 5, 5), torch.randn(8, 8, 1, 1)

    def f(x):
        h = F.conv2d(x, w1, padding=1).relu()
        h = F.conv2d(h, dw, padding=2, groups=8).relu()
        return F.conv2d(h, pw).relu() + 1

    x = torch.randn(2, 3, 16, 16)
    got, kernels = compile_traced(f, (x,), tmp_path / "f")
    assert_near(got, f(x), "cpu")
    assert len(weight_conversions(kernels)) == 1


def test_layout_off_keeps_contiguous_buffers(tmp_path, monkeypatch):
    monkeypatch.setenv("PTC_LAYOUT", "contiguous")
    model = resnet18()
    x = torch.randn(2, 3, 32, 32)
    got, kernels = compile_traced(model, (x,), tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    assert "# layout: " not in kernels
    assert not any(is_channels_last(*c) for c in conv_inputs(kernels) if c[0][2] * c[0][3] > 1)


def model_case(name, dtype, dev="cpu"):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10).eval().to(dev, dtype)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)).to(dev, dtype)
    return model, x


@pytest.mark.parametrize("name,dtype", [
    ("resnet18", torch.float32), ("resnet18", torch.bfloat16),
    ("mobilenet_v3_small", torch.float32), ("mobilenet_v3_small", torch.bfloat16),
    pytest.param("convnext_tiny", torch.float32, marks=pytest.mark.slow),
])
def test_models_equal_eager(name, dtype, tmp_path, dev="cpu"):
    model, x = model_case(name, dtype, dev)
    got, kernels = compile_traced(model, (x,), tmp_path)
    with torch.no_grad():
        assert_near(got, model(x), dev, dtype)
    assert "# layout: " in kernels


def test_outputs_keep_the_users_layout_and_views_convert(tmp_path, dev="cpu"):
    """A convolution's result returned as an output, and a flatten + linear
    reading a channels-last chain (a view the channels-last strides cannot
    express), give eager's values; outputs are contiguous as eager's are."""
    torch.manual_seed(2)
    w1, w2 = torch.randn(8, 3, 3, 3, device=dev), torch.randn(8, 8, 3, 3, device=dev)
    lin = torch.randn(5, 8 * 10 * 10, device=dev)

    def f(x):
        a = F.conv2d(x, w1, padding=1)
        h = F.relu(a)
        b = F.conv2d(h, w2, padding=1) + h
        return a, b, F.linear(b.relu().flatten(1), lin)

    x = torch.randn(2, 3, 10, 10, device=dev)
    got, kernels = compile_traced(f, (x,), tmp_path, fullgraph=True)
    for g, e in zip(got, f(x)):
        assert_near(g, e, dev)
        assert g.is_contiguous() == e.is_contiguous()
    # the first convolution writes an output (contiguous); the second reads
    # relu's result, written channels-last for it
    first, second = conv_inputs(kernels)
    assert not is_channels_last(*first) and is_channels_last(*second)


def test_symbolic_batch(dev="cpu"):
    torch.manual_seed(3)
    w1, w2 = torch.randn(6, 4, 3, 3, device=dev), torch.randn(6, 6, 1, 1, device=dev)

    def f(x):
        h = F.relu(F.conv2d(x, w1, padding=1))
        return F.max_pool2d(F.conv2d(h, w2) * h.sigmoid(), 2)

    cf = ptc.compile(f, dynamic=True)
    with torch.no_grad():
        for n in (2, 3, 5):
            x = torch.randn(n, 4, 8, 8, device=dev)
            assert_near(cf(x), f(x), dev)


def train_traced(m, x, tmp_path):
    """One compiled-autograd step of m on x with tracing on: the forward's
    kernels.txt."""
    ptc.config.trace_dir, ptc.config.compiled_autograd = str(tmp_path), True
    try:
        ptc.compile(m)(x).pow(2).mean().backward()
    finally:
        ptc.config.trace_dir, ptc.config.compiled_autograd = None, False
    kernels = [open(os.path.join(d, n)).read() for d, _, files in os.walk(tmp_path) for n in files
               if n == "kernels.txt"]
    assert len(kernels) == 1
    return kernels[0]


def test_training_graphs_plan_layouts(tmp_path, monkeypatch, dev="cpu"):
    """A training graph's forward stores its convolution chain channels-last
    where layouts are planned for it (CUDA; the CPU with
    PTC_LAYOUT=channels_last), as inference does, and its gradients stay as
    near float64's as eager's (planning was off for training graphs while a
    flipped relu mask, a float32 rounding, passed for a layout bug). On CUDA
    without TF32, which rounds each layout's convolutions differently."""
    import copy

    from test_training import assert_grads_near_float64, smooth_resnet18

    if dev == "cpu":
        monkeypatch.setenv("PTC_LAYOUT", "channels_last")
    torch.manual_seed(0)
    m = smooth_resnet18(torchvision).to(dev)
    m2, ref = copy.deepcopy(m), copy.deepcopy(m).double()
    x = torch.randn(8, 3, 64, 64).to(dev)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        m(x).pow(2).mean().backward()
        ref(x.double()).pow(2).mean().backward()
        kernels = train_traced(m2, x, tmp_path)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    assert "channels-last" in kernels, kernels[:300]
    assert all(is_channels_last(*c) for c in conv_inputs(kernels) if c[0][1] > 3)
    assert_grads_near_float64(m, m2, ref)


def test_cpu_training_graphs_keep_contiguous_layouts(tmp_path):
    """On the CPU a training step's graphs are not planned channels-last
    (oneDNN's convolution backward is slower so at training shapes, and a
    channels-last activation made every weight's gradient channels-last, then
    copied contiguous): the convolutions read contiguous buffers and no
    weight gradient is copied (`aten::clone` of 14 of this resnet18's weight
    gradients a step before)."""
    torch.manual_seed(0)
    m = resnet18().train()
    x = torch.randn(2, 3, 32, 32)
    kernels = train_traced(m, x, tmp_path)
    assert "channels-last" not in kernels
    assert conv_inputs(kernels) and all(st == list(torch.empty(sz).stride())
                                        for sz, st in conv_inputs(kernels))
    compiled = ptc.compile(m)
    ptc.config.compiled_autograd = True
    try:
        compiled(x).sum().backward()  # compiles
        with torch.profiler.profile(record_shapes=True) as prof:
            compiled(x).sum().backward()
    finally:
        ptc.config.compiled_autograd = False
    weights = {tuple(p.shape) for n, p in m.named_parameters() if p.dim() == 4}
    copied = [e.input_shapes for e in prof.events() if e.name == "aten::clone"
              and e.input_shapes and tuple(e.input_shapes[0]) in weights]
    assert copied == []
