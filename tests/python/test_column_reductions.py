"""Reductions over the outer, strided dimension (column sums): the bias and
LayerNorm weight gradients of a transformer's backward, BatchNorm's channel
statistics over channels-last activations. On the GPU they run in column
mode (compiler/codegen/cuda/plan.c: a block of columns x row slices whose
partial states meet in shared memory); here every graph runs through
`ptc-run --check` against the reference interpreter on the CPU and, where
there is a GPU, on CUDA with column mode on and off (PTC_CUDA_SPLIT_COLUMNS=0),
and under ptc.compile against eager torch. Shapes leave the last tile of
columns partly empty (100, 3000 columns) and rows that do not divide among
the slices (1000, 3001)."""
import os

import pytest
import torch

import ptc
from gpucheck import cuda_reason
from ptcio import build_dir, ptc_run

# name, params, body (returning its outputs)
GRAPHS = [
    ("bias_grad_bf16", "%g: bf16[2048,768] cpu",
     "  %s = sum(%g, [0]) : bf16[768]\n  %f = to(%s, f32) : f32[768]\n  return (%f)"),
    ("bias_grad_f16_keepdim", "%g: f16[1000,3072] cpu",
     "  %s = sum(%g, [0], true) : f16[1,3072]\n  return (%s)"),
    ("sum_f32_odd_columns", "%x: f32[3001,100] cpu",
     "  %s = sum(%x, [0]) : f32[100]\n  return (%s)"),
    # LayerNorm's weight and bias gradients: two sums in one kernel, one of
    # them reading a per-row statistic (the same for every column)
    ("layer_norm_grads", "%g: bf16[2048,768] cpu, %x: f32[2048,768] cpu, %r: f32[2048,1] cpu",
     "  %gf = to(%g, f32) : f32[2048,768]\n  %xh = mul(%x, %r) : f32[2048,768]\n"
     "  %p = mul(%gf, %xh) : f32[2048,768]\n  %dw = sum(%p, [0]) : f32[768]\n"
     "  %db = sum(%gf, [0]) : f32[768]\n  return (%dw, %db)"),
    # states of more than one field: Welford's, argmax's
    ("column_stats", "%x: f32[3000,64] cpu",
     "  %v = var(%x, [0]) : f32[64]\n  %a = argmax(%x, 0) : i64[64]\n"
     "  %m = amin(%x, [0]) : f32[64]\n  return (%v, %a, %m)"),
    # channels-last BatchNorm statistics: a column is a channel over N*H*W rows
    ("channels_last_sums_bf16", "%x: bf16[8,28,28,64] cpu",
     "  %s = sum(%x, [0, 1, 2]) : bf16[64]\n  %q = mul(%x, %x) : bf16[8,28,28,64]\n"
     "  %t = sum(%q, [0, 1, 2]) : bf16[64]\n  return (%s, %t)"),
    # a second reduction group reads what the first stored (the column's max)
    ("log_softmax_dim0", "%x: f32[777,1000] cpu",
     "  %l = log_softmax(%x, 0) : f32[777,1000]\n  return (%l)"),
    # a pointwise epilogue after the sum
    ("sum_epilogue", "%x: f32[1024,3000] cpu, %b: f32[3000] cpu",
     "  %s = sum(%x, [0]) : f32[3000]\n  %e = mul(%s, 0.5) : f32[3000]\n"
     "  %o = add(%e, %b) : f32[3000]\n  %h = to(%o, bf16) : bf16[3000]\n  return (%h)"),
]


def run_check(tmp_path, monkeypatch, graph, backend, env=None, syms=()):
    name, params, body = graph
    text = "# ptc ir v1\ngraph %s(%s) {\n%s\n}\n" % (name, params, body)
    path = tmp_path / (name + ".ptir")
    path.write_text(text)
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    sym_args = [a for s in syms for a in ("--sym", s)]
    r = ptc_run("--backend", backend, "--check", "--seed", "3", *sym_args, path, timeout=300)
    assert r.returncode == 0 and "match the reference" in r.stdout, \
        "%s on %s (env %s)\n%s\n%s\n%s" % (name, backend, env, text, r.stdout[-2000:],
                                           r.stderr[-2000:])


@pytest.mark.parametrize("graph", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_cpu_matches_the_reference(tmp_path, monkeypatch, graph):
    run_check(tmp_path, monkeypatch, graph, "cpu")


@pytest.mark.parametrize("split", ["1", "0"])
@pytest.mark.parametrize("graph", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_cuda_matches_the_reference(tmp_path, monkeypatch, graph, split):
    reason = cuda_reason()
    if reason:
        pytest.skip(reason)
    run_check(tmp_path, monkeypatch, graph, "cuda", env={"PTC_CUDA_SPLIT_COLUMNS": split})


# over symbolic rows column mode is a form, run by calls of 32 rows or more
SYMBOLIC = ("symbolic_rows", "%g: bf16[s0,768] cpu, %x: f32[s0,768] cpu",
            "  %gf = to(%g, f32) : f32[s0,768]\n  %p = mul(%gf, %x) : f32[s0,768]\n"
            "  %dw = sum(%p, [0]) : f32[768]\n  %db = sum(%g, [0]) : bf16[768]\n"
            "  return (%dw, %db)")


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("rows", ["8", "2048", "3001"])
def test_symbolic_rows_match_the_reference(tmp_path, monkeypatch, backend, rows):
    reason = cuda_reason() if backend == "cuda" else None
    if reason:
        pytest.skip(reason)
    run_check(tmp_path, monkeypatch, SYMBOLIC, backend, syms=["s0=" + rows])


def bias_and_norm_grads(g, x, r):
    gf = g.float()
    return (gf * (x * r)).sum(0), gf.sum(0), g.sum(0, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_compiled_column_sums_equal_eager(dtype):
    devices = ["cpu"] + ([] if cuda_reason() else ["cuda"])
    for device in devices:
        torch.manual_seed(0)
        g = torch.randn(2048, 768, dtype=dtype, device=device)
        x = torch.randn(2048, 768, device=device)
        r = torch.rand(2048, 1, device=device) + 0.5
        want = bias_and_norm_grads(g, x, r)
        got = ptc.compile(bias_and_norm_grads)(g, x, r)
        for w, o in zip(want, got):
            assert o.dtype == w.dtype and o.shape == w.shape
            tol = 1e-2 if w.dtype != torch.float32 else 1e-4
            torch.testing.assert_close(o.float(), w.float(), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("rows,col", [("2048", True), ("8", False)])
def test_runtime_log_says_column_mode(tmp_path, monkeypatch, rows, col):
    """Through the stand-in libcuda (no GPU: its launches run nothing): the
    +runtime log of a symbolic column sum says column mode for 2048 rows,
    not for 8."""
    fake = os.path.join(build_dir(), "tests", "libptc_fake_cuda.so")
    if not os.path.exists(fake):
        pytest.skip("no stand-in libcuda in this build")
    path = tmp_path / "i8.ptir"
    path.write_text("# ptc ir v1\ngraph f(%x: i8[s0,768] cuda) {\n"
                    "  %0 = sum(%x, [0]) : i64[768]\n  return (%0)\n}\n")
    monkeypatch.setenv("PTC_CUDA_LIBRARY", fake)
    monkeypatch.setenv("PTC_LOGS", "+runtime")
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))
    r = ptc_run("--backend", "cuda", "--sym", "s0=" + rows, path)
    assert r.returncode == 0, r.stderr
    launches = [l for l in r.stderr.splitlines() if " grid " in l and " team " in l]
    assert len(launches) == 1 and ("column mode" in launches[0]) == col, r.stderr


@pytest.mark.parametrize("name", ["PTC_CUDA_COLUMN_TILE", "PTC_CUDA_TEAM"])
def test_a_size_that_is_not_a_power_of_two_warns(tmp_path, monkeypatch, name):
    """PTC_CUDA_COLUMN_TILE=12 and PTC_CUDA_TEAM=12 were taken as unset
    without a word; each now warns, naming the value and the size used."""
    path = tmp_path / "cols.ptir"
    path.write_text("# ptc ir v1\ngraph f(%x: f32[4096,768] cpu) {\n"
                    "  %0 = sum(%x, [0]) : f32[768]\n  return (%0)\n}\n")
    monkeypatch.setenv(name, "12")
    monkeypatch.setenv("PTC_COMPILE_WORKER", "0")
    r = ptc_run("--emit=ptx", "--backend", "cuda", "--no-cache", path)
    assert r.returncode == 0, r.stderr
    assert "%s=12 is not a power of two; the planned size" % name in r.stderr, r.stderr
