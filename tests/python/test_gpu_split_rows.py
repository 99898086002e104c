"""Split rows on CUDA (compiler/codegen/cuda/plan.c): a reduction with few,
long rows (BatchNorm training statistics: 64 channels of 32*112*112, a
sum of millions of elements) gives each row several blocks, whose partial
states the row's last block combines in a fixed order. On a GPU every graph
runs through `ptc-run --check` against the reference interpreter with split
rows on and off (PTC_CUDA_SPLIT_ROWS=0), and under ptc.compile against eager
torch, twice, with the same bits both times. Without a GPU the plan is
checked through the stand-in libcuda (the +runtime log of each launch).
Shapes include rows that divide by nothing (999983, 1234567 elements)."""
import os

import pytest
import torch
import torch.nn.functional as F

import ptc
from gpucheck import cuda_reason
from ptcio import build_dir, ptc_run
from test_column_reductions import run_check

# name, params, body: every one but the first (Welford's) splits on a GPU of
# 132 SMs (an H100 / H200)
GRAPHS = [
    ("batch_norm_stats_bf16", "%x: bf16[32,64,112,112] cpu",
     "  %f = to(%x, f32) : f32[32,64,112,112]\n  %v = var(%f, [0, 2, 3]) : f32[64]\n"
     "  %m = mean(%f, [0, 2, 3]) : f32[64]\n  return (%v, %m)"),
    ("sums_3_rows", "%x: f32[3,1000000] cpu", "  %s = sum(%x, [1]) : f32[3]\n  return (%s)"),
    ("sum_argmax_4m", "%x: f32[4194304] cpu",
     "  %s = sum(%x, [0]) : f32[]\n  %a = argmax(%x, 0) : i64[]\n  return (%s, %a)"),
    ("max_min_odd_rows", "%x: f32[7,999983] cpu",
     "  %m = amax(%x, [1]) : f32[7]\n  %n = amin(%x, [1]) : f32[7]\n  return (%m, %n)"),
    ("sum_bf16_odd", "%x: bf16[5,1234567] cpu", "  %s = sum(%x, [1]) : bf16[5]\n  return (%s)"),
    ("sum_epilogue", "%x: f32[64,401408] cpu, %b: f32[64] cpu",
     "  %s = sum(%x, [1]) : f32[64]\n  %e = mul(%s, 0.5) : f32[64]\n"
     "  %o = add(%e, %b) : f32[64]\n  %h = to(%o, bf16) : bf16[64]\n  return (%h)"),
]


def write_graph(tmp_path, graph, device="cpu"):
    name, params, body = graph
    path = tmp_path / (name + ".ptir")
    path.write_text("# ptc ir v1\ngraph %s(%s) {\n%s\n}\n" % (name, params.replace(" cpu", " " + device), body))
    return path


@pytest.mark.parametrize("split", ["1", "0"])
@pytest.mark.parametrize("graph", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_cuda_matches_the_reference(tmp_path, monkeypatch, graph, split):
    reason = cuda_reason()
    if reason:
        pytest.skip(reason)
    run_check(tmp_path, monkeypatch, graph, "cuda", env={"PTC_CUDA_SPLIT_ROWS": split})


@pytest.mark.parametrize("graph", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_the_plan_splits_these_rows(tmp_path, monkeypatch, graph):
    """Through the stand-in libcuda (no GPU: its launches run nothing), the
    +runtime log of each graph says split rows, and with
    PTC_CUDA_SPLIT_ROWS=0 it does not; Welford's rows (BatchNorm statistics)
    never split: unsplit they ran as fast or up to twice as fast on an H200
    (plan.c's header)."""
    fake = os.path.join(build_dir(), "tests", "libptc_fake_cuda.so")
    if not os.path.exists(fake):
        pytest.skip("no stand-in libcuda in this build")
    path = write_graph(tmp_path, graph, "cuda")
    monkeypatch.setenv("PTC_CUDA_LIBRARY", fake)
    monkeypatch.setenv("PTC_LOGS", "+runtime")
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))
    for split in ("1", "0"):
        monkeypatch.setenv("PTC_CUDA_SPLIT_ROWS", split)
        r = ptc_run("--backend", "cuda", path)
        assert r.returncode == 0, r.stderr
        # kernels and combinations (kernels that do not split may share a launch)
        launches = [l for l in r.stderr.splitlines() if " grid " in l]
        splits = split == "1" and graph[0] != "batch_norm_stats_bf16"
        assert launches and all(("split rows" in l) == splits for l in launches), r.stderr


def row_stats(x):
    xf = x.float()
    return xf.sum(1), xf.mean(1), xf.var(1), xf.amax(1), xf.argmax(1), x.sum(1)


def batch_norm_train(x, w, b, rm, rv):
    return F.batch_norm(x.float(), rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)


SHAPES = [(64, 401408), (3, 1000000), (1, 4194304), (7, 999983), (5, 1234567)]


def cuda_or_skip():
    reason = cuda_reason()
    if reason:
        pytest.skip(reason)
    return "cuda"


def close(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), what
        return
    tol = 2e-2 if want.dtype in (torch.bfloat16, torch.float16) else 1e-4
    scale = want.float().abs().max().item() + 1
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol * scale, msg=what)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_compiled_row_stats_equal_eager_and_repeat(shape, dtype):
    device = cuda_or_skip()
    torch.manual_seed(0)
    x = torch.randn(*shape, device=device).to(dtype)
    x[0, shape[1] - 3] = 9.0  # a unique maximum near the end of the first row
    want = row_stats(x)
    f = ptc.compile(row_stats)
    first = f(x)
    again = f(x)
    for i, (w, o, o2) in enumerate(zip(want, first, again)):
        close(o, w, "output %d of %s %s" % (i, shape, dtype))
        assert torch.equal(o, o2), "output %d differs between runs" % i


def test_compiled_batch_norm_training_statistics():
    device = cuda_or_skip()
    torch.manual_seed(0)
    x = torch.randn(32, 64, 112, 112, device=device).to(torch.bfloat16)
    w = torch.rand(64, device=device) + 0.5
    b = torch.randn(64, device=device)
    rm, rv = torch.zeros(64, device=device), torch.ones(64, device=device)
    rm2, rv2 = rm.clone(), rv.clone()
    want = batch_norm_train(x, w, b, rm, rv)
    got = ptc.compile(batch_norm_train)(x, w, b, rm2, rv2)
    close(got, want, "batch_norm output")
    close(rm2, rm, "running mean")
    close(rv2, rv, "running var")


def test_compiled_layer_norm_of_long_rows():
    device = cuda_or_skip()
    torch.manual_seed(0)
    x = torch.randn(3, 1000003, device=device)
    fn = lambda t: F.layer_norm(t, (1000003,))  # noqa: E731
    close(ptc.compile(fn)(x), fn(x), "layer_norm")


def test_welford_divides_once_per_unrolled_chunk(tmp_path, monkeypatch):
    """Welford's update divides by the count for every element, a chain of
    dependent divisions (BatchNorm statistics took four times a sum's time
    on an H200); the CUDA kernel takes each unrolled iteration's eight
    elements as one chunk (their mean and squared deviations) merged with one
    division. The PTX of the statistics kernel, split and not: the block
    with the iteration's eight loads has one div.rn.f32."""
    path = write_graph(tmp_path, GRAPHS[0], "cuda")
    for split in ("1", "0"):
        monkeypatch.setenv("PTC_CUDA_SPLIT_ROWS", split)
        r = ptc_run("--emit=ptx", "--backend", "cuda", "--cuda-arch", "sm_90", path)
        if "not part of this build" in r.stderr:
            pytest.skip("the CUDA backend is not part of this build")
        assert r.returncode == 0, r.stderr
        welford = r.stdout.split(".entry")[1]  # the first kernel: var's
        blocks = [b for b in welford.split("$L__BB") if b.count("ld.global") == 8]
        assert blocks and all(b.count("div.rn.f32") == 1 for b in blocks), (split, blocks)


def bn_stats(x):
    return torch.var_mean(x.float(), dim=(0, 2, 3), unbiased=False)


@pytest.mark.parametrize("vector", ["1", "0"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vector_loads_and_their_misaligned_fallback_equal_eager(monkeypatch, dtype, vector):
    """Reductions load 16-byte vectors along their rows (plan.c's
    plan_red_vec; PTC_CUDA_RED_VECTOR=0 turns it off): BatchNorm statistics
    (Welford, a chunk a vector) and row statistics equal eager's on a
    tensor whose storage is 16-byte aligned and, through the scalar entry
    the launch falls back to, on the same sizes one element into the
    storage (a misaligned pointer)."""
    device = cuda_or_skip()
    monkeypatch.setenv("PTC_CUDA_RED_VECTOR", vector)
    torch.manual_seed(0)
    n = 8 * 64 * 56 * 56
    storage = torch.randn(n + 8, device=device).to(dtype)
    for fn, shape in ((bn_stats, (8, 64, 56, 56)), (row_stats, (64, 25088))):
        f = ptc.compile(fn)
        for offset in (0, 1):
            x = storage[offset:offset + n].view(*shape)
            assert (x.data_ptr() % 16 == 0) == (offset == 0)
            for i, (o, w) in enumerate(zip(f(x), fn(x))):
                close(o, w, "output %d of %s, offset %d" % (i, fn.__name__, offset))
