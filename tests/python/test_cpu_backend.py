"""The CPU backend against the reference interpreter and against torch.

Every op of ops.def that has a CPU lowering is compiled by `ptc-run --backend
cpu --check` (which compares with the reference interpreter and exits 1 on the
first mismatch) on random shapes, dtypes, strides, broadcasts, size-1 and
zero-size dims, and its saved outputs are compared with torch's own result.
"""
import os
import re
import tempfile

import pytest
import torch

from ptcio import ptc_run, ptir_type, read_tensors, write_tensors

G = torch.Generator().manual_seed(1234)

# The backend under test; test_gpu_ops.py runs every case here with "cuda".
BACKEND = "cpu"


def rnd(shape, dtype=torch.float32, lo=-2.0, hi=2.0, positive=False):
    if dtype == torch.bool:
        return torch.rand(shape, generator=G) > 0.5
    if dtype.is_floating_point:
        t = torch.rand(shape, generator=G, dtype=torch.float64) * (hi - lo) + lo
        if positive:
            t = t.abs() + 0.1
        return t.to(dtype)
    t = torch.randint(-8, 8, shape, generator=G)
    if positive:
        t = t.abs() + 1
    return t.to(dtype)


def strided(t):
    """The same values with non-contiguous strides (a transposed copy)."""
    if t.dim() < 2:
        return t
    return t.transpose(0, 1).contiguous().transpose(0, 1)


TOL = {torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-5),
       torch.float16: (2e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}


def assert_matches(got, want, what):
    assert got.shape == want.shape, "%s: shape %s vs torch %s" % (what, got.shape, want.shape)
    assert got.dtype == want.dtype, "%s: dtype %s vs torch %s" % (what, got.dtype, want.dtype)
    if want.dtype.is_floating_point:
        rtol, atol = TOL[want.dtype]
        scale = max(1.0, want.double().abs().nan_to_num(0, 0, 0).max().item()) if want.numel() else 1
        torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol * scale,
                                   equal_nan=True, msg=lambda m: "%s: %s" % (what, m))
    else:
        assert torch.equal(got, want), "%s: %s vs %s" % (what, got, want)


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory() as d:
        os.environ["PTC_CACHE_DIR"] = os.path.join(d, "cache")
        yield d


def run_case(workdir, name, expr, inputs, fn, nout=1, check_torch=True):
    """Compiles `expr` over named inputs, checks against the reference and torch."""
    with torch.no_grad():
        want = fn(*[t for _, t in inputs])
    wants = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(wants) == nout
    params = ", ".join("%%%s: %s" % (n, ptir_type(t)) for n, t in inputs)
    outs = ", ".join("%%o%d" % i for i in range(nout))
    types = ", ".join(ptir_type(w.contiguous(), device=False) for w in wants)
    text = "# ptc ir v1\ngraph forward(%s) {\n  %s = %s : %s\n  return (%s)\n}\n" % (
        params, outs, expr, types, outs)
    base = os.path.join(workdir, name)
    with open(base + ".ptir", "w") as f:
        f.write(text)
    write_tensors(base + ".in.bin", inputs)
    r = ptc_run("--backend", BACKEND, "--check", "--inputs", base + ".in.bin",
                "--save-outputs", base + ".out.bin", base + ".ptir")
    assert r.returncode == 0, "%s\n%s\n%s" % (text, r.stdout, r.stderr)
    if check_torch:
        got = read_tensors(base + ".out.bin")
        for i, (g, w) in enumerate(zip(got, wants)):
            assert_matches(g[1], w.contiguous(), "%s output %d" % (name, i))


# ---- pointwise ------------------------------------------------------------------------------

UNARY = [
    ("abs", torch.abs, False), ("neg", torch.neg, False), ("relu", torch.relu, False),
    ("floor", torch.floor, False), ("ceil", torch.ceil, False), ("trunc", torch.trunc, False),
    ("sign", torch.sign, False), ("round", torch.round, False), ("exp", torch.exp, False),
    ("log", torch.log, True), ("log1p", torch.log1p, True), ("expm1", torch.expm1, False),
    ("sqrt", torch.sqrt, True), ("rsqrt", torch.rsqrt, True), ("sin", torch.sin, False),
    ("cos", torch.cos, False), ("tanh", torch.tanh, False), ("sigmoid", torch.sigmoid, False),
    ("erf", torch.erf, False), ("reciprocal", torch.reciprocal, True),
    ("logit", torch.logit, True),
    ("silu", torch.nn.functional.silu, False), ("hardswish", torch.nn.functional.hardswish, False),
    ("hardsigmoid", torch.nn.functional.hardsigmoid, False),
    ("isnan", torch.isnan, False), ("logical_not", torch.logical_not, False),
]

SHAPES = [[7], [3, 33], [2, 1, 17], [0, 5], [1]]


@pytest.mark.parametrize("op,fn,positive", UNARY, ids=[u[0] for u in UNARY])
def test_unary(workdir, op, fn, positive):
    for i, shape in enumerate(SHAPES):
        x = rnd(shape, positive=positive)
        if i == 1:
            x = strided(x)
        run_case(workdir, "%s_%d" % (op, i), "%s(%%x)" % op, [("x", x)], fn)


def has_cpu_kernel(fn, x):
    try:
        fn(x)
        return True
    except RuntimeError as e:
        if "not implemented for" in str(e):
            return False
        raise


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32])
def test_unary_dtypes(workdir, dtype):
    ops = [("abs", torch.abs), ("neg", torch.neg), ("relu", torch.relu), ("sign", torch.sign)]
    if dtype.is_floating_point:
        ops += [("exp", torch.exp), ("tanh", torch.tanh), ("sqrt", lambda x: torch.sqrt(x.abs()))]
    for op, fn in ops:
        x = rnd([4, 9], dtype)
        expr = "%s(%%x)" % op
        if op == "sqrt":
            x = x.abs()
            fn = torch.sqrt
        if dtype == torch.float16 and not has_cpu_kernel(fn, x):
            continue  # torch < 2 has no f16 CPU kernel for some ops (e.g. clamp_min)
        run_case(workdir, "%s_%s" % (op, str(dtype)[6:]), expr, [("x", x)], fn)


def test_activations(workdir):
    F = torch.nn.functional
    x = rnd([5, 13], lo=-4, hi=4)
    cases = [
        ("gelu(%x)", F.gelu), ('gelu(%x, approximate="tanh")', lambda t: F.gelu(t, approximate="tanh")),
        ("leaky_relu(%x, 0.2)", lambda t: F.leaky_relu(t, 0.2)), ("elu(%x)", F.elu),
        ("softplus(%x)", F.softplus), ("hardtanh(%x, -0.5, 1.5)", lambda t: F.hardtanh(t, -0.5, 1.5)),
        ("round(%x, decimals=2)", lambda t: torch.round(t, decimals=2)),
    ]
    for i, (expr, fn) in enumerate(cases):
        run_case(workdir, "act_%d" % i, expr, [("x", x)], fn)


BINARY = [
    ("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div),
    ("maximum", torch.maximum), ("minimum", torch.minimum), ("atan2", torch.atan2),
    ("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt),
    ("ge", torch.ge), ("pow", lambda a, b: torch.pow(a.abs() + 0.5, b)),
    ("remainder", torch.remainder), ("logical_and", torch.logical_and),
    ("logical_xor", torch.logical_xor), ("copysign", torch.copysign),
]

BROADCASTS = [([4, 9], [4, 9]), ([4, 9], [9]), ([3, 1, 5], [1, 6, 1]), ([0, 3], [3]), ([1], [2, 2])]


@pytest.mark.parametrize("op,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary(workdir, op, fn):
    for i, (sa, sb) in enumerate(BROADCASTS):
        a, b = rnd(sa), rnd(sb)
        if op == "pow":
            a = a.abs() + 0.5
            fn2 = torch.pow
        else:
            fn2 = fn
        if op == "remainder":
            b = b.abs() + 0.5
        run_case(workdir, "%s_%d" % (op, i), "%s(%%a, %%b)" % op, [("a", a), ("b", b)], fn2)


def test_binary_promotion(workdir):
    cases = [
        ("add(%a, %b)", torch.add, rnd([5, 6], torch.int32), rnd([6], torch.float32)),
        ("mul(%a, %b)", torch.mul, rnd([5, 6], torch.float16), rnd([5, 6], torch.float32)),
        ("div(%a, %b)", torch.div, rnd([5, 6], torch.int64), rnd([5, 6], torch.int64, positive=True)),
        ("sub(%a, %b, alpha=2)", lambda a, b: torch.sub(a, b, alpha=2), rnd([7], torch.int64), rnd([7], torch.int64)),
        ('div(%a, %b, rounding_mode="floor")', lambda a, b: torch.div(a, b, rounding_mode="floor"),
         rnd([9], torch.int32), rnd([9], torch.int32, positive=True)),
        ('div(%a, %b, rounding_mode="trunc")', lambda a, b: torch.div(a, b, rounding_mode="trunc"),
         rnd([9]), rnd([9], positive=True)),
        ("bitwise_and(%a, %b)", torch.bitwise_and, rnd([9], torch.int32), rnd([9], torch.int32)),
        ("bitwise_xor(%a, %b)", torch.bitwise_xor, rnd([9], torch.bool), rnd([9], torch.bool)),
        ("lt(%a, %b)", torch.lt, rnd([4, 3], torch.float16), rnd([3], torch.float64)),
        ("copysign(%a, %b)", torch.copysign, rnd([4, 3], torch.int32), rnd([3], torch.float16)),
        ("copysign(%a, %b)", torch.copysign, rnd([9], torch.bfloat16), rnd([9], torch.bfloat16)),
    ]
    for i, (expr, fn, a, b) in enumerate(cases):
        run_case(workdir, "promo_%d" % i, expr, [("a", a), ("b", b)], fn)


def test_scalar_operands(workdir):
    x = rnd([3, 8])
    cases = [("add(%x, 2.5)", lambda t: t + 2.5), ("mul(%x, 3)", lambda t: t * 3),
             ("rsub(%x, 1.0)", lambda t: 1.0 - t), ("pow(%x, 2)", lambda t: t ** 2),
             ("gt(%x, 0.5)", lambda t: t > 0.5), ("copysign(%x, -0.0)", lambda t: t.copysign(-0.0)), ("clamp(%x, -1.0, 0.5)", lambda t: t.clamp(-1.0, 0.5)),
             ("masked_fill(%x, %m, -7.0)", None)]
    m = rnd([3, 8], torch.bool)
    for i, (expr, fn) in enumerate(cases):
        if fn is None:
            run_case(workdir, "scalar_%d" % i, expr, [("x", x), ("m", m)], lambda t, mm: t.masked_fill(mm, -7.0))
        else:
            run_case(workdir, "scalar_%d" % i, expr, [("x", x)], fn)


def test_where_clamp_tensor(workdir):
    c, a, b = rnd([4, 5], torch.bool), rnd([4, 5]), rnd([5])
    run_case(workdir, "where", "where(%c, %a, %b)", [("c", c), ("a", a), ("b", b)], torch.where)
    lo, hi = rnd([5]) - 1, rnd([4, 5]) + 1
    run_case(workdir, "clamp_t", "clamp(%a, %lo, %hi)", [("a", a), ("lo", lo), ("hi", hi)],
             lambda x, l, h: torch.clamp(x, l, h))


def test_to_and_dropout(workdir):
    x = rnd([6, 7])
    run_case(workdir, "to_f16", "to(%x, f16)", [("x", x)], lambda t: t.to(torch.float16))
    run_case(workdir, "to_i32", "to(%x, i32)", [("x", x)], lambda t: t.to(torch.int32))
    run_case(workdir, "to_bool", "to(%x, bool)", [("x", x)], lambda t: t.to(torch.bool))
    # dropout is checked against the reference only: torch's RNG differs
    run_case(workdir, "dropout", "dropout(%x, 0.3, true, seed=5)", [("x", x)],
             lambda t: t, check_torch=False)


# ---- reductions ----------------------------------------------------------------------------------

REDUCE_SHAPES = [([6, 37], 1), ([5, 4, 3], 0), ([3, 1, 8], -1), ([0, 4], 1), ([7, 1000], 1)]


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod", "var", "std", "logsumexp"])
def test_reductions(workdir, op):
    for i, (shape, dim) in enumerate(REDUCE_SHAPES):
        if op in ("amax", "amin", "logsumexp", "var", "std", "mean") and 0 in shape:
            continue
        x = rnd(shape, lo=0.5, hi=1.5) if op == "prod" else rnd(shape)
        fn = {"sum": lambda t: t.sum(dim), "mean": lambda t: t.mean(dim),
              "amax": lambda t: t.amax(dim), "amin": lambda t: t.amin(dim),
              "prod": lambda t: t.prod(dim), "var": lambda t: t.var(dim),
              "std": lambda t: t.std(dim), "logsumexp": lambda t: t.logsumexp(dim)}[op]
        arg = "%d" % dim if op == "prod" else "[%d]" % dim
        run_case(workdir, "%s_%d" % (op, i), "%s(%%x, %s)" % (op, arg), [("x", x)], fn)
    x = rnd([4, 6, 5])
    keep = {"sum": lambda t: t.sum([0, 2], keepdim=True), "amax": lambda t: t.amax([0, 2], keepdim=True)}
    if op in keep:
        run_case(workdir, "%s_keep" % op, "%s(%%x, [0, 2], true)" % op, [("x", x)], keep[op])


def test_reduce_dtypes(workdir):
    run_case(workdir, "sum_i32", "sum(%x, [1])", [("x", rnd([5, 9], torch.int32))], lambda t: t.sum(1))
    run_case(workdir, "sum_bool", "sum(%x)", [("x", rnd([5, 9], torch.bool))], lambda t: t.sum())
    run_case(workdir, "sum_f16", "sum(%x, [1])", [("x", rnd([5, 300], torch.float16))], lambda t: t.sum(1))
    run_case(workdir, "any", "any(%x, [1])", [("x", rnd([5, 9], torch.bool))], lambda t: t.any(1))
    run_case(workdir, "all", "all(%x, [0])", [("x", rnd([5, 9]) > -1.5)], lambda t: t.all(0))
    run_case(workdir, "amax_i64", "amax(%x, [0])", [("x", rnd([5, 9], torch.int64))], lambda t: t.amax(0))
    run_case(workdir, "sum_strided", "sum(%x, [0])", [("x", strided(rnd([37, 5])))], lambda t: t.sum(0))


def test_arg_reductions(workdir):
    x = rnd([6, 40])
    run_case(workdir, "argmax", "argmax(%x, 1)", [("x", x)], lambda t: t.argmax(1))
    run_case(workdir, "argmin", "argmin(%x, 0, true)", [("x", x)], lambda t: t.argmin(0, keepdim=True))
    run_case(workdir, "argmax_all", "argmax(%x)", [("x", x)], lambda t: t.argmax())
    ties = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    run_case(workdir, "argmax_ties", "argmax(%x, 1)", [("x", ties)], lambda t: t.argmax(1))
    run_case(workdir, "cumsum", "cumsum(%x, 1)", [("x", x)], lambda t: t.cumsum(1))
    run_case(workdir, "cumprod", "cumprod(%x, 0)", [("x", x[:, :7] / 2)], lambda t: t.cumprod(0))
    run_case(workdir, "sort", "sort(%x, dim=1, descending=true)", [("x", x)],
             lambda t: tuple(t.sort(1, True)), nout=2)
    run_case(workdir, "sort_strided", "sort(%x, dim=0)", [("x", strided(rnd([37, 5])))],
             lambda t: tuple(t.sort(0)), nout=2)
    run_case(workdir, "topk", "topk(%x, 5, dim=1, largest=false)", [("x", x)],
             lambda t: tuple(t.topk(5, 1, False)), nout=2)


def test_softmax_norms(workdir):
    F = torch.nn.functional
    x = rnd([8, 65])
    run_case(workdir, "softmax", "softmax(%x, 1)", [("x", x)], lambda t: t.softmax(1))
    run_case(workdir, "softmax0", "softmax(%x, 0)", [("x", x)], lambda t: t.softmax(0))
    run_case(workdir, "log_softmax", "log_softmax(%x, -1)", [("x", x)], lambda t: t.log_softmax(-1))
    w, b = rnd([65]), rnd([65])
    run_case(workdir, "layer_norm", "layer_norm(%x, [65], %w, %b)", [("x", x), ("w", w), ("b", b)],
             lambda t, ww, bb: F.layer_norm(t, [65], ww, bb))
    x4 = rnd([2, 6, 5, 7])
    g, bt = rnd([6]), rnd([6])
    run_case(workdir, "group_norm", "group_norm(%x, 3, %g, %b)", [("x", x4), ("g", g), ("b", bt)],
             lambda t, gg, bb: F.group_norm(t, 3, gg, bb))
    rm, rv = rnd([6]), rnd([6], positive=True)
    run_case(workdir, "batch_norm_eval", "batch_norm(%x, %g, %b, %rm, %rv, false, 0.1, 1e-5)",
             [("x", x4), ("g", g), ("b", bt), ("rm", rm), ("rv", rv)],
             lambda t, gg, bb, m, v: F.batch_norm(t, m, v, gg, bb, False, 0.1, 1e-5))

    def bn_train(t, gg, bb, m, v):
        m, v = m.clone(), v.clone()
        y = F.batch_norm(t, m, v, gg, bb, True, 0.1, 1e-5)
        return y, m, v
    run_case(workdir, "batch_norm_train", "batch_norm(%x, %g, %b, %rm, %rv, true, 0.1, 1e-5)",
             [("x", x4), ("g", g), ("b", bt), ("rm", rm), ("rv", rv)], bn_train, nout=3)


# ---- shapes, indexing, creation ---------------------------------------------------------------------

def test_views(workdir):
    x = rnd([4, 6, 5])
    cases = [
        ("permute(%x, [2, 0, 1])", lambda t: t.permute(2, 0, 1)),
        ("transpose(%x, 0, 2)", lambda t: t.transpose(0, 2)),
        ("view(%x, [24, 5])", lambda t: t.reshape(24, 5)),
        ("reshape(%x, [4, 30])", lambda t: t.reshape(4, 30)),
        ("expand(%y, [3, 4, 6, 5])", None),
        ("slice(%x, 1, 1, 5, 2)", lambda t: t[:, 1:5:2]),
        ("select(%x, 1, -1)", lambda t: t[:, -1]),
        ("narrow(%x, 2, 1, 3)", lambda t: t.narrow(2, 1, 3)),
        ("unsqueeze(%x, 1)", lambda t: t.unsqueeze(1)),
        ("flatten(%x, 1)", lambda t: t.flatten(1)),
        ("squeeze(%z)", None),
    ]
    for i, (expr, fn) in enumerate(cases):
        if "%y" in expr:
            run_case(workdir, "view_%d" % i, expr, [("y", rnd([4, 1, 5]))], lambda t: t.expand(3, 4, 6, 5))
        elif "%z" in expr:
            run_case(workdir, "view_%d" % i, expr, [("z", rnd([3, 1, 2, 1]))], lambda t: t.squeeze())
        else:
            run_case(workdir, "view_%d" % i, expr, [("x", x)], fn)
    # a view of a view, then arithmetic, from a strided input
    run_case(workdir, "view_chain", "reshape(%x, [6, 20])", [("x", strided(rnd([4, 6, 5]).transpose(1, 2)))],
             lambda t: t.reshape(6, 20))


def test_cat_split_pad(workdir):
    a, b = rnd([3, 4]), rnd([3, 2])
    run_case(workdir, "cat", "cat([%a, %b], 1)", [("a", a), ("b", b)], lambda x, y: torch.cat([x, y], 1))
    run_case(workdir, "stack", "stack([%a, %a], 0)", [("a", a)], lambda x: torch.stack([x, x], 0))
    run_case(workdir, "split", "split(%a, 3, 1)", [("a", a)], lambda x: x.split(3, 1), nout=2)
    run_case(workdir, "chunk", "chunk(%a, 3, 0)", [("a", a)], lambda x: x.chunk(3, 0), nout=3)
    run_case(workdir, "unbind", "unbind(%b, 1)", [("b", b)], lambda x: x.unbind(1), nout=2)
    F = torch.nn.functional
    run_case(workdir, "pad", "constant_pad_nd(%a, [1, 2, 0, 1], 0.5)", [("a", a)],
             lambda x: F.pad(x, [1, 2, 0, 1], value=0.5))
    run_case(workdir, "pad_neg", "constant_pad_nd(%a, [-1, 1])", [("a", a)], lambda x: F.pad(x, [-1, 1]))
    run_case(workdir, "repeat", "repeat(%b, [2, 1, 3])", [("b", b)], lambda x: x.repeat(2, 1, 3))
    run_case(workdir, "roll", "roll(%a, [1, -1], [0, 1])", [("a", a)], lambda x: x.roll((1, -1), (0, 1)))
    run_case(workdir, "triu", "triu(%a, 1)", [("a", a)], lambda x: x.triu(1))
    run_case(workdir, "tril", "tril(%a)", [("a", a)], lambda x: x.tril())


def test_indexing(workdir):
    x = rnd([5, 7])
    idx = torch.tensor([4, 0, 2, 2], dtype=torch.int64)
    run_case(workdir, "index_select", "index_select(%x, 0, %i)", [("x", x), ("i", idx)],
             lambda t, i: t.index_select(0, i))
    gi = torch.randint(0, 7, (5, 3), generator=G)
    run_case(workdir, "gather", "gather(%x, 1, %i)", [("x", x), ("i", gi)], lambda t, i: t.gather(1, i))
    ni = torch.tensor([-1, 0, 3])
    run_case(workdir, "index", "index(%x, [none, %i])", [("x", x), ("i", ni)], lambda t, i: t[:, i])
    ia, ib = torch.tensor([0, 4]), torch.tensor([6, -2])
    run_case(workdir, "index2", "index(%x, [%a, %b])", [("x", x), ("a", ia), ("b", ib)],
             lambda t, a, b: t[a, b])
    w = rnd([10, 4])
    ids = torch.tensor([[1, 9], [0, 0]])
    run_case(workdir, "embedding", "embedding(%w, %i)", [("w", w), ("i", ids)],
             lambda ww, i: torch.nn.functional.embedding(i, ww))


def test_creation(workdir):
    x = rnd([3])
    run_case(workdir, "full", "add(%x, %z)", [("x", x), ("z", torch.zeros([2, 3]))], lambda t, z: t + z)
    g = "# ptc ir v1\n"
    cases = [
        ("arange", "arange(0, 10, 3)", "i64[4]", torch.arange(0, 10, 3)),
        ("arange_f", "arange(0.5, 2.0, 0.25, dtype=f32)", "f32[6]", torch.arange(0.5, 2.0, 0.25)),
        ("ones", "ones([2, 3])", "f32[2,3]", torch.ones(2, 3)),
        ("full_i", "full([4], 7, dtype=i32)", "i32[4]", torch.full([4], 7, dtype=torch.int32)),
    ]
    for name, expr, ty, want in cases:
        path = os.path.join(workdir, name + ".ptir")
        with open(path, "w") as f:
            f.write(g + "graph forward() {\n  %%0 = %s : %s\n  return (%%0)\n}\n" % (expr, ty))
        out = path + ".out.bin"
        r = ptc_run("--backend", BACKEND, "--check", "--save-outputs", out, path)
        assert r.returncode == 0, r.stderr
        assert_matches(read_tensors(out)[0][1], want, name)


# ---- matrix products, convolution, pooling, attention -------------------------------------------------

def test_products(workdir):
    a, b = rnd([7, 5]), rnd([5, 9])
    run_case(workdir, "mm", "mm(%a, %b)", [("a", a), ("b", b)], torch.mm)
    run_case(workdir, "mm_t", "mm(%a, %b)", [("a", strided(a)), ("b", b)], torch.mm)
    ba, bb = rnd([3, 4, 6]), rnd([3, 6, 2])
    run_case(workdir, "bmm", "bmm(%a, %b)", [("a", ba), ("b", bb)], torch.bmm)
    run_case(workdir, "matmul_b", "matmul(%a, %b)", [("a", rnd([2, 3, 4, 6])), ("b", rnd([3, 6, 5]))], torch.matmul)
    run_case(workdir, "matmul_v", "matmul(%a, %b)", [("a", rnd([6])), ("b", rnd([6, 3]))], torch.matmul)
    run_case(workdir, "matmul_dot", "matmul(%a, %b)", [("a", rnd([6])), ("b", rnd([6]))], torch.matmul)
    w, bias = rnd([8, 6]), rnd([8])
    run_case(workdir, "linear", "linear(%x, %w, %b)", [("x", rnd([2, 3, 6])), ("w", w), ("b", bias)],
             torch.nn.functional.linear)
    run_case(workdir, "addmm", "addmm(%c, %a, %b, beta=0.5, alpha=2)", [("c", rnd([9])), ("a", a), ("b", b)],
             lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2))
    run_case(workdir, "mm_f64", "mm(%a, %b)", [("a", a.double()), ("b", b.double())], torch.mm)
    run_case(workdir, "mm_big", "mm(%a, %b)", [("a", rnd([130, 70])), ("b", rnd([70, 150]))], torch.mm)


def test_conv_pool(workdir):
    F = torch.nn.functional
    x, w, b = rnd([2, 4, 9, 8]), rnd([6, 2, 3, 3]), rnd([6])
    run_case(workdir, "conv2d", "conv2d(%x, %w, %b, 2, 1, 1, 2)", [("x", x), ("w", w), ("b", b)],
             lambda t, ww, bb: F.conv2d(t, ww, bb, 2, 1, 1, 2))
    run_case(workdir, "conv2d_dil", "conv2d(%x, %w, none, 1, 2, 2)", [("x", x), ("w", rnd([3, 4, 3, 3]))],
             lambda t, ww: F.conv2d(t, ww, None, 1, 2, 2))
    run_case(workdir, "conv1x1", "conv2d(%x, %w)", [("x", x), ("w", rnd([5, 4, 1, 1]))], F.conv2d)
    run_case(workdir, "conv1d", "conv1d(%x, %w, none, 1, 1)", [("x", rnd([2, 3, 10])), ("w", rnd([4, 3, 3]))],
             lambda t, ww: F.conv1d(t, ww, None, 1, 1))
    run_case(workdir, "convT", "conv_transpose2d(%x, %w, none, 2, 1, 1)",
             [("x", rnd([1, 4, 5, 5])), ("w", rnd([4, 3, 3, 3]))],
             lambda t, ww: F.conv_transpose2d(t, ww, None, 2, 1, 1))
    run_case(workdir, "maxpool", "max_pool2d(%x, [3, 3], [2, 2], [1, 1])", [("x", x)],
             lambda t: F.max_pool2d(t, 3, 2, 1))
    run_case(workdir, "maxpool_idx", "max_pool2d_with_indices(%x, [2, 2])", [("x", x)],
             lambda t: F.max_pool2d(t, 2, return_indices=True), nout=2)
    run_case(workdir, "avgpool", "avg_pool2d(%x, [3, 3], [2, 2], [1, 1])", [("x", x)],
             lambda t: F.avg_pool2d(t, 3, 2, 1))
    run_case(workdir, "avgpool_nopad", "avg_pool2d(%x, [3, 2], [1, 2], [1, 1], false, false)", [("x", x)],
             lambda t: F.avg_pool2d(t, (3, 2), (1, 2), 1, False, False))
    run_case(workdir, "adaptive", "adaptive_avg_pool2d(%x, [4, 3])", [("x", x)],
             lambda t: F.adaptive_avg_pool2d(t, (4, 3)))
    run_case(workdir, "adaptive1", "adaptive_avg_pool2d(%x, [1, 1])", [("x", x)],
             lambda t: F.adaptive_avg_pool2d(t, 1))


def test_attention(workdir):
    F = torch.nn.functional
    if not hasattr(F, "scaled_dot_product_attention"):
        pytest.skip("this torch has no scaled_dot_product_attention")
    q, k, v = rnd([2, 3, 5, 8]), rnd([2, 3, 7, 8]), rnd([2, 3, 7, 4])
    run_case(workdir, "sdpa", "scaled_dot_product_attention(%q, %k, %v)", [("q", q), ("k", k), ("v", v)],
             F.scaled_dot_product_attention)
    run_case(workdir, "sdpa_causal", "scaled_dot_product_attention(%q, %k, %v, is_causal=true)",
             [("q", q), ("k", k), ("v", v)], lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True))
    # with dropout it is written out in prims, drawing what the reference draws
    # (against the reference only: torch's RNG differs)
    m = rnd([5, 7], torch.bool)
    run_case(workdir, "sdpa_dropout", "scaled_dot_product_attention(%q, %k, %v, %m, dropout_p=0.3, seed=5)",
             [("q", q), ("k", k), ("v", v), ("m", m)], lambda *a: a[0][..., :4], check_torch=False)
    run_case(workdir, "sdpa_dropout_causal",
             "scaled_dot_product_attention(%q, %k, %v, dropout_p=0.5, is_causal=true, scale=0.3, seed=9)",
             [("q", q), ("k", k), ("v", v)], lambda *a: a[0][..., :4], check_torch=False)


# ---- kernel size ----------------------------------------------------------------------------

def test_long_chain_splits_into_bounded_kernels(workdir):
    """A chain of 700 pointwise ops is compiled as several kernels (each at most
    PTC_KERNEL_MAX_ENTRIES body entries, so LLVM's time stays linear in the chain),
    each reading the one before: the result still matches torch."""
    steps = [("sin(%s)", lambda y, x, c: torch.sin(y)), ("mul(%s, %%x)", lambda y, x, c: y * x),
             ("add(%s, %r)", lambda y, x, c: y + c), ("tanh(%s)", lambda y, x, c: torch.tanh(y)),
             ("abs(%s)", lambda y, x, c: torch.abs(y)), ("sub(%s, %%x)", lambda y, x, c: y - x)]
    x = rnd([3, 37], lo=-1, hi=1)
    lines, y, prev = [], x, "%x"
    for i in range(700):
        form, fn = steps[i % len(steps)]
        c = 0.5 + i / 65536
        expr = form % ((prev, c) if "%r" in form else (prev,))
        lines.append("  %%%d = %s : f32[3,37]" % (i, expr))
        y, prev = fn(y, x, c), "%%%d" % i
    base = os.path.join(workdir, "long_chain")
    with open(base + ".ptir", "w") as f:
        f.write("# ptc ir v1\ngraph forward(%%x: f32[3,37] cpu) {\n%s\n  return (%s)\n}\n"
                % ("\n".join(lines), prev))
    write_tensors(base + ".in.bin", [("x", x)])
    r = ptc_run("--backend", BACKEND, "--check", "--stats", "--inputs", base + ".in.bin",
                "--save-outputs", base + ".out.bin", base + ".ptir")
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"kernels: (\d+) compiled, (\d+) cached", r.stdout)
    assert m and int(m.group(1)) + int(m.group(2)) >= 3, r.stdout
    assert_matches(read_tensors(base + ".out.bin")[0][1], y, "long_chain")


# ---- f32 sin and cos: libmvec's vector calls or the polynomial -------------------------------

@pytest.mark.parametrize("libmvec", ["1", "0"])
def test_sin_cos_every_magnitude(workdir, monkeypatch, libmvec):
    """f32 sin and cos over every magnitude (1e-30 .. 1e30, zeros, inf, nan) in
    the vector body and the tail: with glibc's libmvec (one call per vector)
    and without (PTC_CPU_LIBMVEC=0: the straight-line polynomial, and libm for
    vectors with a lane past its range). Both within an f32 ulp or two of torch."""
    if BACKEND != "cpu":
        pytest.skip("the CPU backend's own paths")
    monkeypatch.setenv("PTC_CPU_LIBMVEC", libmvec)
    mags = torch.logspace(-30, 30, 61, dtype=torch.float64)
    x = (rnd([61, 19], torch.float64, lo=-1, hi=1) * mags[:, None]).float().reshape(-1)
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 999.9])
    x[6:100] = torch.linspace(-1000, 1000, 94)  # around the polynomial's range limit
    for op, fn in (("sin", torch.sin), ("cos", torch.cos)):
        name = "%s_mag_%s" % (op, libmvec)
        run_case(workdir, name, "%s(%%x)" % op, [("x", x)], fn, check_torch=False)
        got = read_tensors(os.path.join(workdir, name + ".out.bin"))[0][1]
        torch.testing.assert_close(got, fn(x), rtol=0, atol=3e-7, equal_nan=True)


def test_sin_calls_libmvec_once_per_vector(workdir, monkeypatch):
    """Where glibc's libmvec has the kernels' width, a vector of sin is one call
    of its function (as torch's kernels call Sleef's), not one libm call per
    lane."""
    if BACKEND != "cpu":
        pytest.skip("the CPU backend's own paths")
    monkeypatch.delenv("PTC_CPU_LIBMVEC", raising=False)
    base = os.path.join(workdir, "sin_llvm")
    with open(base + ".ptir", "w") as f:
        f.write("# ptc ir v1\ngraph forward(%x: f32[100] cpu) {\n"
                "  %0 = sin(%x) : f32[100]\n  return (%0)\n}\n")
    r = ptc_run("--emit=llvm", base + ".ptir")
    assert r.returncode == 0, r.stderr
    if "declare <" not in r.stdout or "_sinf(" not in r.stdout:
        pytest.skip("no libmvec for this host's width")
    vector = re.findall(r"call <\d+ x float> @(_ZGV\w+)\(", r.stdout)
    assert vector and all(name.endswith("_sinf") for name in vector), r.stdout
    assert len(re.findall(r"call float @sinf\(", r.stdout)) <= 1, "libm only for a scalar tail"
