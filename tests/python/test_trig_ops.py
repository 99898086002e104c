"""tan, asin (arcsin), acos (arccos), sinh and cosh: pointwise.def rows built
from prims (passes/decomp_pointwise.c): tan = sin / cos, asin and acos from
atan2 and sqrt((1 - x)(1 + x)), sinh and cosh from expm1 of x / 2. Compiled
results match eager torch in every float dtype at the domain's edges (NaN
outside asin's and acos's, the largest finite sinh and cosh of f32), their
gradients (through the prims) match eager's and finite differences, and the
numpy functions on traced arrays are tested in test_capture_numpy_traced.py."""
import math
import os
import shutil
import subprocess
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from ptcio import ptc_run  # noqa: E402

OPS = ["tan", "asin", "acos", "sinh", "cosh"]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float64: 1e-13, torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
INF, NAN = math.inf, math.nan


def edges(op, dtype):
    """Random values in op's interesting range plus its edge cases."""
    g = torch.Generator().manual_seed(sum(map(ord, op)))
    if op in ("asin", "acos"):
        x = torch.rand(4, 33, generator=g, dtype=torch.float64) * 2.4 - 1.2  # some outside [-1, 1]
        eps = torch.finfo(dtype).eps
        special = [1.0, -1.0, 1 - eps, -1 + eps, 0.0, -0.0, 1 + 2 * eps, -1.5, INF, -INF, NAN, 0.5]
    elif op == "tan":
        x = torch.randn(4, 33, generator=g, dtype=torch.float64) * 4
        special = [0.0, -0.0, 1.5, -1.5, 1.57, 4.7, 100.0, 1e-30, INF, -INF, NAN, 0.75]
    else:
        x = torch.randn(4, 33, generator=g, dtype=torch.float64) * 8
        # (finite, overflowing); torch's vectorised f32 kernels overflow from
        # exp(88.73) on: the test below
        big, over = {torch.float32: (88.0, 90.0), torch.float64: (709.5, 711.0)}.get(dtype,
                                                                                     (11.0, 12.0))
        special = [0.0, -0.0, 1e-30, -1e-6, big, -big, over, 40.0, INF, -INF, NAN, 0.5]
    x[0, :len(special)] = torch.tensor(special, dtype=torch.float64)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_trig_op_matches_eager(op, dtype):
    x = edges(op, dtype)
    fn = getattr(torch, op)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns: not here
        got = ptc.compile(lambda t: fn(t), fullgraph=True)(x)
    want = fn(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype], equal_nan=True)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    if op in ("asin", "acos"):  # outside [-1, 1]: NaN, as eager
        assert torch.isnan(got[0, 6:11]).all()
    if op != "tan":  # tan(+-0), asin(+-0) and sinh(+-0) keep the zero's sign
        assert torch.equal(torch.signbit(got[0, :6]), torch.signbit(want[0, :6]))


@pytest.mark.parametrize("op", ["sinh", "cosh"])
def test_f32_sinh_and_cosh_are_finite_up_to_their_limit(op):
    """exp(x) overflows f32 from 88.73, sinh and cosh from 89.42: between them
    ptc's results are the f64 ones rounded (torch's vectorised kernel gives
    inf there, its scalar one the finite value)."""
    x = torch.tensor([88.8, 89.0, -89.4, 89.41, 89.5, -90.0] + [1.0] * 26)
    got = ptc.compile(lambda t: getattr(torch, op)(t), fullgraph=True)(x)
    want = getattr(torch, op)(x.double()).float()
    assert torch.isfinite(got[:4]).all() and torch.isinf(got[4:6]).all()
    torch.testing.assert_close(got, want, rtol=2e-6, atol=0)


@pytest.mark.parametrize("op", OPS)
def test_trig_op_of_integers_is_float_as_eager(op):
    x = torch.tensor([[-3, -1, 0], [1, 2, 5]], dtype=torch.int64)
    fn = getattr(torch, op)
    got = ptc.compile(lambda t: fn(t), fullgraph=True)(x)
    want = fn(x)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6, equal_nan=True)


def test_trig_spellings_capture_one_node_each(tmp_path):
    x = edges("asin", torch.float32)[1:]

    def f(t):
        return (torch.tan(t) + t.tan() + t.clone().tan_(), torch.asin(t) + torch.arcsin(t)
                + t.asin() + t.arcsin() + t.clone().asin_(), torch.acos(t) + torch.arccos(t)
                + t.acos() + t.clone().arccos_(), torch.sinh(t) + t.sinh() + t.clone().sinh_(),
                torch.cosh(t) + t.cosh() + t.clone().cosh_())

    ptc.config.trace_dir = str(tmp_path)
    try:
        got = ptc.compile(f, fullgraph=True)(x)
    finally:
        ptc.config.trace_dir = None
    for g, w in zip(got, f(x)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)
    captured = [os.path.join(d, n) for d, _, files in os.walk(tmp_path) for n in files
                if n == "captured.ptir"]
    assert len(captured) == 1
    text = open(captured[0]).read()
    for op, count in (("tan", 3), ("asin", 5), ("acos", 4), ("sinh", 3), ("cosh", 3)):
        assert text.count(" = %s(" % op) == count, (op, text)


def test_trig_reference_backend_matches_eager():
    for op in OPS:
        x = edges(op, torch.float64)
        fn = getattr(torch, op)
        got = ptc.compile(lambda t: fn(t), backend="reference", fullgraph=True)(x)
        torch.testing.assert_close(got, fn(x), rtol=1e-13, atol=1e-13, equal_nan=True)


@pytest.fixture
def compiled_autograd():
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = False


def interior(op):
    """Points where op is smooth: inside (-1, 1) for asin and acos, away
    from tan's poles."""
    g = torch.Generator().manual_seed(11)
    x = torch.rand(3, 7, generator=g, dtype=torch.float64) * 2 - 1
    return x * 0.95 if op in ("asin", "acos") else x * 3 if op != "tan" else x * 1.4


@pytest.mark.parametrize("op", OPS)
def test_trig_gradient_matches_eager_and_finite_differences(op, compiled_autograd):
    fn = getattr(torch, op)

    def f(t):
        return fn(t * 1.0) * torch.arange(7.0, dtype=torch.float64)

    x = interior(op)
    compiled = ptc.compile(f)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    f(xe).sum().backward()
    compiled(xc).sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-10, atol=1e-12)
    # the rules the brief names: tan' = 1 + tan^2, asin' = -acos' = 1 / sqrt(1 - x^2),
    # sinh' = cosh, cosh' = sinh
    want = {"tan": 1 + torch.tan(x) ** 2, "asin": 1 / torch.sqrt(1 - x * x),
            "acos": -1 / torch.sqrt(1 - x * x), "sinh": torch.cosh(x), "cosh": torch.sinh(x)}[op]
    torch.testing.assert_close(xc.grad, want * torch.arange(7.0, dtype=torch.float64),
                               rtol=1e-10, atol=1e-12)
    ex = ptc.explain(f, backend="ptc")(x.clone().requires_grad_())
    assert not ex.autograd_fallback
    assert torch.autograd.gradcheck(compiled, (x.clone().requires_grad_(),), eps=1e-6, atol=1e-6)


TRIG_GRAPH = """# ptc ir v1
graph f(%x: f32[64] cuda, %d: f64[64] cuda, %h: bf16[64] cuda) {
  %0 = tan(%x) : f32[64]
  %1 = asin(%0) : f32[64]
  %2 = acos(%1) : f32[64]
  %3 = sinh(%2) : f32[64]
  %4 = cosh(%3) : f32[64]
  %5 = tan(%d) : f64[64]
  %6 = acos(%5) : f64[64]
  %7 = sinh(%h) : bf16[64]
  %8 = cosh(%7) : bf16[64]
  %9 = fmod(%x, %4) : f32[64]
  %10 = fmod(%d, %6) : f64[64]
  return (%4, %6, %8, %9, %10)
}
"""


def test_trig_ops_build_ptx_for_sm_90(tmp_path):
    """The CUDA backend's code for them and fmod (test_fmod.py): PTX (no GPU needed), which ptxas
    assembles for sm_90 where the CUDA toolkit is installed."""
    path = tmp_path / "trig.ptir"
    path.write_text(TRIG_GRAPH)
    r = ptc_run("--emit=ptx", "--backend", "cuda", "--cuda-arch", "sm_90", "--no-cache", path)
    if r.returncode != 0 and "CUDA" in r.stderr and "not" in r.stderr:
        pytest.skip("ptc built without CUDA: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    assert ".target sm_90" in r.stdout
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not os.path.exists(ptxas):
        pytest.skip("no ptxas")
    # ptc-run's listing: its comment lines (`;`, `//`) around one module
    module = r.stdout[r.stdout.index("// Generated by LLVM"):]
    ptx = tmp_path / "trig.ptx"
    ptx.write_text("\n".join(ln for ln in module.splitlines() if not ln.startswith("; ptc")))
    subprocess.run([ptxas, "-arch=sm_90", str(ptx), "-o", str(tmp_path / "trig.cubin")],
                   check=True, capture_output=True, text=True)
