"""The CUDA backend's own code paths, each checked against the reference.

test_gpu_ops.py covers every op on small shapes; these cases are sized and
shaped to reach what only the GPU code generator has: vectorised pointwise
kernels (16-byte accesses) and their scalar fallback, teams of every size
(a thread, part of a warp, a warp, a block) for softmax, layer_norm, Welford
and argmax, reductions over contiguous and strided dimensions, reductions
long enough to loop, locals in shared memory and in global scratch, 64-bit
indexing under symbolic sizes, f16/bf16 storage and the GPU's own math
functions over wide argument ranges. Each graph runs through
`ptc-run --backend cuda --check`, which compares every output with the
reference interpreter. Without a GPU they skip with ptc's reason.
"""
import os
import subprocess

import pytest

from gpucheck import require_gpu
from ptcio import build_dir


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_kernels")
    os.environ["PTC_CACHE_DIR"] = str(d / "cache")
    return d


def check(workdir, name, body, params, seed=1, env=None, syms=()):
    """Runs graph `body` over `params` on the GPU against the reference."""
    text = "# ptc ir v1\ngraph %s(%s) {\n%s\n}\n" % (name, params, body)
    path = workdir / (name + ".ptir")
    path.write_text(text)
    args = [os.path.join(build_dir(), "tools", "run", "ptc-run"), "--backend", "cuda", "--check",
            "--seed", str(seed)]
    for s in syms:
        args += ["--sym", s]
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(args + [str(path)], capture_output=True, text=True, timeout=300, env=e)
    assert r.returncode == 0 and "match the reference" in r.stdout, \
        "%s (env %s)\n%s\n%s\n%s" % (name, env, text, r.stdout[-2000:], r.stderr[-2000:])


# ---- pointwise -----------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ["f32", "bf16", "f16", "f64", "i32"])
def test_pointwise_vectorised(workdir, dt):
    body = ("  %%a = add(%%x, %%b) : %s[256,4096]\n  %%r = relu(%%a) : %s[256,4096]\n"
            "  %%m = mul(%%r, %%x) : %s[256,4096]\n  return (%%m)" % (dt, dt, dt))
    check(workdir, "pw_" + dt, body, "%%x: %s[256,4096] cpu, %%b: %s[4096] cpu" % (dt, dt))


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_gelu_vectorised(workdir, dt):
    """erf's two polynomials in the vectorised entry, and half lanes stored in
    pairs from the unrounded values (x + b rounded as eager rounds it)."""
    body = ("  %%a = add(%%x, %%b) : %s[256,4096]\n  %%g = gelu(%%a) : %s[256,4096]\n"
            "  return (%%g)" % (dt, dt))
    check(workdir, "gelu_" + dt, body, "%%x: %s[256,4096] cpu, %%b: %s[4096] cpu" % (dt, dt))


@pytest.mark.parametrize("erfc", ["0", "2"])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_gelu_erfc_forms(workdir, dt, erfc):
    """gelu's 1 + erf(z) as erfc(-z) (PTC_CUDA_ERFC=2, every kernel; bf16
    kernels have it by default) and as erf (0), over inputs to +-12: the
    erfc form's tail past |z| = 5 and its infinities' limits."""
    body = ("  %%s = mul(%%x, 4.0) : %s[256,4096]\n  %%a = add(%%s, %%b) : %s[256,4096]\n"
            "  %%g = gelu(%%a) : %s[256,4096]\n  return (%%g)" % (dt, dt, dt))
    check(workdir, "gelu_erfc%s_%s" % (erfc, dt), body,
          "%%x: %s[256,4096] cpu, %%b: %s[4096] cpu" % (dt, dt), env={"PTC_CUDA_ERFC": erfc})


def test_pointwise_mixed_and_odd(workdir):
    body = ("  %hf = to(%h, f32) : f32[1000,333]\n  %s = sigmoid(%x) : f32[1000,333]\n"
            "  %m = mul(%s, %hf) : f32[1000,333]\n  %o = to(%m, bf16) : bf16[1000,333]\n"
            "  return (%o, %s)")
    check(workdir, "pw_odd", body, "%x: f32[1000,333] cpu, %h: bf16[1000,333] cpu")
    # a view at an odd offset: contiguous but not 16-byte aligned
    body = ("  %v = slice(%x, 1, 1, 4097) : f32[64,4096]\n  %e = exp(%v) : f32[64,4096]\n"
            "  return (%e)")
    check(workdir, "pw_offset", body, "%x: f32[64,4104] cpu")
    body = ("  %t = transpose(%x, 0, 1) : f32[512,256]\n  %e = mul(%t, %t) : f32[512,256]\n"
            "  return (%e)")
    check(workdir, "pw_transpose", body, "%x: f32[256,512] cpu")


MATH = ["exp", "log", "log1p", "expm1", "tanh", "erf", "sin", "cos", "sqrt", "rsqrt", "sigmoid"]


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_math_ranges(workdir, dt):
    for op in MATH:
        for scale in (1.0, 30.0, 1000.0):
            if op in ("exp", "expm1") and scale > 30:
                continue
            body = ("  %%s = mul(%%x, %s) : %s[65536]\n  %%y = %s(%%s) : %s[65536]\n  return (%%y)"
                    % (scale, dt, op, dt))
            check(workdir, "math_%s_%s_%d" % (op, dt, scale), body, "%%x: %s[65536] cpu" % dt)
    for op in ("atan2", "pow", "remainder"):
        body = "  %%y = %s(%%x, %%z) : %s[65536]\n  return (%%y)" % (op, dt)
        check(workdir, "math2_%s_%s" % (op, dt), body, "%%x: %s[65536] cpu, %%z: %s[65536] cpu" % (dt, dt))


def test_random_and_where(workdir):
    body = ("  %d = dropout(%x, 0.3, true, seed=7) : f32[300000]\n"
            "  %c = gt(%x, 0.5) : bool[300000]\n  %w = where(%c, %d, %x) : f32[300000]\n  return (%w)")
    check(workdir, "dropout_where", body, "%x: f32[300000] cpu")


# ---- rows: softmax, layer_norm, welford, argmax under every team size ------------------------

ROWS = [(4096, 128), (64, 8192), (20000, 5), (8, 100000), (17, 4099), (1000, 1000), (300, 65536)]


@pytest.mark.parametrize("rows,cols", ROWS, ids=["%dx%d" % r for r in ROWS])
def test_softmax_layer_norm(workdir, rows, cols):
    body = ("  %%s = softmax(%%x, -1) : f32[%d,%d]\n"
            "  %%l = layer_norm(%%x, [%d], %%w, %%b) : f32[%d,%d]\n  return (%%s, %%l)"
            % (rows, cols, cols, rows, cols))
    params = "%%x: f32[%d,%d] cpu, %%w: f32[%d] cpu, %%b: f32[%d] cpu" % (rows, cols, cols, cols)
    check(workdir, "rows_%d_%d" % (rows, cols), body, params)


def test_scalar_entries(workdir):
    """The scalar entries that run when a pointer is not 16-byte aligned."""
    env = {"PTC_CUDA_VECTOR": "0"}
    body = ("  %s = softmax(%x, -1) : f32[512,1024]\n  %l = layer_norm(%x, [1024], %w, %b) : f32[512,1024]\n"
            "  %g = gelu(%l) : f32[512,1024]\n  return (%s, %g)")
    check(workdir, "scalar_entries", body, "%x: f32[512,1024] cpu, %w: f32[1024] cpu, %b: f32[1024] cpu",
          env=env)


@pytest.mark.parametrize("team", ["1", "4", "32", "128", "1024"])
def test_forced_teams(workdir, team):
    env = {"PTC_CUDA_TEAM": team}
    body = ("  %s = softmax(%x, -1) : f32[300,700]\n  %l = layer_norm(%x, [700], %w, %b) : f32[300,700]\n"
            "  %a = argmax(%x, 1) : i64[300]\n  %n = amin(%x, [1]) : f32[300]\n"
            "  %v = var(%x, [1]) : f32[300]\n  %p = sum(%x, [0]) : f32[700]\n"
            "  return (%s, %l, %a, %n, %v, %p)")
    params = "%x: f32[300,700] cpu, %w: f32[700] cpu, %b: f32[700] cpu"
    check(workdir, "teams_%s" % team, body, params, env=env)
    body = ("  %y, %m, %v = batch_norm(%x, %g, %b, %rm, %rv, true, 0.1, 1e-5) : f32[8,24,13,13], "
            "f32[24], f32[24]\n  return (%y, %m, %v)")
    check(workdir, "bn_train_%s" % team, body,
          "%x: f32[8,24,13,13] cpu, %g: f32[24] cpu, %b: f32[24] cpu, %rm: f32[24] cpu, %rv: f32[24] cpu",
          env=env)


def test_argmax_ties(workdir):
    # rounded values repeat, so ties are everywhere: the first index must win
    body = ("  %s = mul(%x, 2.0) : f32[512,3000]\n  %r = round(%s) : f32[512,3000]\n"
            "  %a = argmax(%r, 1) : i64[512]\n  %b = argmin(%r, 0) : i64[3000]\n  return (%a, %b)")
    check(workdir, "argmax_ties", body, "%x: f32[512,3000] cpu")


def test_reductions_shapes(workdir):
    cases = [
        ("sum_all", "sum(%x) : f32[]", "f32[1048576]"),
        ("sum_dim0", "sum(%x, [0]) : f32[1024]", "f32[4096,1024]"),
        ("mean_hw", "mean(%x, [2, 3]) : f32[32,256]", "f32[32,256,7,7]"),
        ("amax_mid", "amax(%x, [1]) : f32[16,128]", "f32[16,4000,128]"),
        ("std_rows", "std(%x, [1]) : f32[1000]", "f32[1000,777]"),
        ("sum_i32", "sum(%x, [1]) : i64[64]", "i32[64,5000]"),
        ("prod_small", "prod(%x, 1) : f32[2048]", "f32[2048,6]"),
        ("any_bool", "any(%x, [1]) : bool[100]", "bool[100,3000]"),
    ]
    for name, expr, ty in cases:
        check(workdir, name, "  %%y = %s\n  return (%%y)" % expr, "%%x: %s cpu" % ty)


def test_half_rows(workdir):
    for dt in ("bf16", "f16"):
        body = ("  %%s = softmax(%%x, -1) : %s[2048,512]\n"
                "  %%l = layer_norm(%%x, [512], %%w, %%b) : %s[2048,512]\n  return (%%s, %%l)" % (dt, dt))
        params = "%%x: %s[2048,512] cpu, %%w: %s[512] cpu, %%b: %s[512] cpu" % (dt, dt, dt)
        check(workdir, "half_rows_" + dt, body, params)


@pytest.mark.parametrize("blocks", ["5", "8"])
def test_half_rows_under_register_caps(workdir, blocks):
    """Row kernels asked for registers that fit 5 or 8 blocks of 256 threads
    per SM (PTC_CUDA_ROW_MIN_BLOCKS; 48 and 32 registers, spilling part of
    the row): the same results."""
    body = ("  %s = softmax(%x, -1) : bf16[4096,768]\n"
            "  %l = layer_norm(%x, [768], %w, %b) : bf16[4096,768]\n  return (%s, %l)")
    check(workdir, "half_rows_blocks" + blocks, body,
          "%x: bf16[4096,768] cpu, %w: bf16[768] cpu, %b: bf16[768] cpu",
          env={"PTC_CUDA_ROW_MIN_BLOCKS": blocks})


ROW_STATS = [("bf16", 512, 768), ("f16", 300, 700), ("f32", 1000, 777), ("f32", 16, 8192)]


@pytest.mark.parametrize("dt,rows,cols", ROW_STATS, ids=["%s_%dx%d" % r for r in ROW_STATS])
def test_row_statistics(workdir, dt, rows, cols):
    """Row mode's two-pass Welford (mean, then squared deviations from it, over
    the row in registers) and its results taken from registers by later
    groups: layer_norm (no correction), var (a correction of 1), std, next to a max;
    rows that fill every lane's chunks (768), rows that leave the last chunk
    partly empty (700, 777), and a block team (8192)."""
    r, c = rows, cols
    body = ("  %%l = layer_norm(%%x, [%d], %%w, %%b) : %s[%d,%d]\n"
            "  %%v = var(%%x, [1]) : %s[%d]\n"
            "  %%vv = var(%%x, [1], keepdim=true) : %s[%d,1]\n"
            "  %%sd = std(%%x, [1]) : %s[%d]\n"
            "  %%mx = amax(%%x, [1], true) : %s[%d,1]\n"
            "  %%d = sub(%%x, %%mx) : %s[%d,%d]\n"
            "  %%z = div(%%d, %%vv) : %s[%d,%d]\n"
            "  return (%%l, %%v, %%sd, %%z)"
            % (c, dt, r, c, dt, r, dt, r, dt, r, dt, r, dt, r, c, dt, r, c))
    params = "%%x: %s[%d,%d] cpu, %%w: %s[%d] cpu, %%b: %s[%d] cpu" % (dt, r, c, dt, c, dt, c)
    check(workdir, "row_stats_%s_%d_%d" % (dt, r, c), body, params)


def test_scratch_locals(workdir):
    body = ("  %s = softmax(%x, -1) : f32[777,1000]\n  %l = log_softmax(%x, 0) : f32[777,1000]\n"
            "  return (%s, %l)")
    for limit in ("0", "48"):
        check(workdir, "scratch_%s" % limit, body, "%x: f32[777,1000] cpu",
              env={"PTC_CUDA_SMEM_LIMIT": limit})


def test_symbolic_sizes(workdir):
    body = ("  %l = layer_norm(%x, [768], %w, %b) : f32[s0,768]\n  %g = gelu(%l) : f32[s0,768]\n"
            "  %s = softmax(%g, 0) : f32[s0,768]\n  return (%s)")
    params = "%x: f32[s0,768] cpu, %w: f32[768] cpu, %b: f32[768] cpu"
    for n in ("1", "3001"):
        check(workdir, "symbolic_%s" % n, body, params, syms=["s0=" + n])


def test_examples_with_externs(workdir):
    """Whole example graphs (linear, attention: externs run through the host)."""
    root = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    exdir = os.path.join(root, "examples")
    for f in sorted(os.listdir(exdir)):
        if not f.endswith(".ptir"):
            continue
        r = subprocess.run([os.path.join(build_dir(), "tools", "run", "ptc-run"), "--backend", "cuda",
                            "--check", "--all", os.path.join(exdir, f)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, "%s\n%s\n%s" % (f, r.stdout[-2000:], r.stderr[-2000:])
