"""The reference interpreter against eager torch, op by op.

For every torch-level op and every prim of ops.def, random cases are generated
with torch (random shapes with zero-size and size-1 dims, transposed and
strided-slice inputs recorded as explicit strides, broadcasting, every dtype:
a dtype torch rejects for an op is simply not generated), written as one .ptir
graph plus an input file per op, run by `ptc-run --inputs ... --save-outputs
...`, and compared with torch: exactly for integers and bools, within a
dtype-aware tolerance for floats. Random ops are checked against ops.h's
counter-based RNG reimplemented here, for determinism and statistics.

Works with torch 1.13 (cases using ops missing there are skipped).
"""
import math
import os
import random
import tempfile

import pytest
import torch
import torch.nn.functional as F

import ptcio

aten = torch.ops.aten
CPU = torch.device("cpu")
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
ALL = [torch.bool] + INTS + FLOATS
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")

if not os.path.exists(os.path.join(ptcio.build_dir(), "tools", "run", "ptc-run")):
    pytest.skip("ptc-run is not built", allow_module_level=True)


# ---- cases ------------------------------------------------------------------------


class Case:
    """One node: op(args, kwargs) with torch's expected outputs."""

    def __init__(self, op, args, kwargs, want, tol=None):
        self.op, self.args, self.kwargs, self.tol = op, args, kwargs, tol
        self.want = list(want) if isinstance(want, (tuple, list)) else [want]


def upcast(v):
    """f16/bf16 tensors (also inside lists) as f64."""
    if isinstance(v, torch.Tensor) and v.dtype in (torch.float16, torch.bfloat16):
        return v.double()
    if isinstance(v, (list, tuple)):
        return type(v)(upcast(x) for x in v)
    return v


def make_case(op, args, kwargs=None, ref=None, tol=None, exact_math=False):
    """A Case, or None when torch rejects the call (an unsupported dtype, a
    shape error): what torch cannot run is not a case. exact_math: for f16 and
    bf16 the expected values are torch's on f64 copies rounded once, which is
    what the reference promises (torch's own reduced-precision convolutions
    and products accumulate in the reduced type)."""
    kwargs = kwargs or {}
    fn = ref if ref is not None else getattr(aten, op)
    try:
        want = fn(*args, **kwargs)
        if exact_math:
            outs = list(want) if isinstance(want, (tuple, list)) else [want]
            if any(o.dtype in (torch.float16, torch.bfloat16) for o in outs):
                exact = fn(*upcast(list(args)), **upcast(kwargs))
                exact = list(exact) if isinstance(exact, (tuple, list)) else [exact]
                want = [e.to(o.dtype) for e, o in zip(exact, outs)]
    except (RuntimeError, TypeError, NotImplementedError, ValueError, IndexError):
        return None
    return Case(op, args, kwargs, want, tol)


def fmt(v, names):
    """A Python value as .ptir argument text; tensors become %names."""
    if isinstance(v, torch.Tensor):
        return "%" + names[id(v)]
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if any(c in r for c in ".e") else r + ".0"
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, torch.dtype):
        return ptcio.PTIR_NAME[v]
    if isinstance(v, torch.device):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt(x, names) for x in v) + "]"
    raise TypeError(v)


def tensors_in(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from tensors_in(x)


def out_type(t):
    return "%s[%s]" % (ptcio.PTIR_NAME[t.dtype], ",".join(str(d) for d in t.shape))


def build(cases, prefix="c"):
    """One graph holding every case: (ptir text, inputs, outputs per case)."""
    names, inputs, sig, body, rets = {}, [], [], [], []
    for ci, c in enumerate(cases):
        for v in list(c.args) + list(c.kwargs.values()):
            for t in tensors_in(v):
                if id(t) not in names:
                    names[id(t)] = "%s%d_i%d" % (prefix, ci, len(inputs))
                    inputs.append((names[id(t)], t))
                    sig.append("%%%s: %s" % (names[id(t)], ptcio.ptir_type(t)))
        outs = ["%s%d_o%d" % (prefix, ci, j) for j in range(len(c.want))]
        args = [fmt(a, names) for a in c.args]
        args += ["%s=%s" % (k, fmt(v, names)) for k, v in c.kwargs.items()]
        body.append("  %s = %s(%s) : %s" % (", ".join("%" + o for o in outs), c.op,
                                             ", ".join(args),
                                             ", ".join(out_type(w) for w in c.want)))
        rets += outs
    text = "# ptc ir v1\ngraph g(%s) {\n%s\n  return (%s)\n}\n" % (
        ", ".join(sig), "\n".join(body), ", ".join("%" + r for r in rets))
    return text, inputs


def run_graph(cases, tmp):
    """Runs the cases in one ptc-run; returns (outputs per case, error text)."""
    text, inputs = build(cases)
    gpath, ipath, opath = (os.path.join(tmp, n) for n in ("g.ptir", "in.bin", "out.bin"))
    with open(gpath, "w") as f:
        f.write(text)
    ptcio.write_tensors(ipath, inputs)
    if os.path.exists(opath):
        os.remove(opath)
    p = ptcio.ptc_run("--inputs", ipath, "--save-outputs", opath, gpath)
    if p.returncode != 0:
        return None, p.stderr.strip() + "\n" + text[:3000]
    outs = [t for _, t in ptcio.read_tensors(opath)]
    per_case, k = [], 0
    for c in cases:
        per_case.append(outs[k:k + len(c.want)])
        k += len(c.want)
    return per_case, None


DEFAULT_TOL = {
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (2e-5, 1e-6),
    torch.float64: (1e-9, 1e-12),
}


def compare(case, got, want):
    """None if equal enough, else a message."""
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return "got %s%s, torch %s%s" % (got.dtype, tuple(got.shape), want.dtype,
                                         tuple(want.shape))
    want = want.detach().contiguous()
    if not want.dtype.is_floating_point:
        if torch.equal(got, want):
            return None
        bad = (got != want).nonzero()[0].tolist()
        return "at %s: got %s, torch %s" % (bad, got[tuple(bad)].item(), want[tuple(bad)].item())
    rtol, atol = DEFAULT_TOL[want.dtype]
    if case.tol is not None:
        rtol, atol = case.tol.get(want.dtype, (rtol, atol)) if isinstance(case.tol, dict) \
            else case.tol
    g, w = got.double(), want.double()
    same_nan = torch.equal(g.isnan(), w.isnan())
    finite = w.isfinite()
    same_inf = torch.equal(g[~finite & ~w.isnan()], w[~finite & ~w.isnan()])
    close = torch.isclose(g[finite], w[finite], rtol=rtol, atol=atol)
    if same_nan and same_inf and bool(close.all()):
        return None
    diff = (g - w).abs().nan_to_num(nan=math.inf, posinf=math.inf)
    diff[g.isnan() & w.isnan()] = 0
    diff[(g == w)] = 0
    i = tuple(int(x) for x in (diff == diff.max()).nonzero()[0]) if diff.numel() else ()
    return "at %s: got %r, torch %r (rtol %g atol %g)" % (list(i), g[i].item(), w[i].item(),
                                                         rtol, atol)


def describe(case):
    def d(v):
        if isinstance(v, torch.Tensor):
            return "%s%s%s" % (ptcio.PTIR_NAME[v.dtype], list(v.shape),
                               "" if v.is_contiguous() else "{%s}" % list(v.stride()))
        if isinstance(v, (list, tuple)):
            return "[%s]" % ", ".join(d(x) for x in v)
        return repr(v)
    args = [d(a) for a in case.args] + ["%s=%s" % (k, d(v)) for k, v in case.kwargs.items()]
    return "%s(%s)" % (case.op, ", ".join(args))


def meta_gap(case):
    """Calls torch accepts that ptc's meta inference rejects on purpose:
    adaptive_avg_pool2d of an empty plane, which torch refuses in general but
    answers with nan on its output_size=(1, 1) fast path; ptc refuses both."""
    ts = [a for a in case.args if isinstance(a, torch.Tensor)]
    return (case.op == "adaptive_avg_pool2d" and bool(ts) and 0 in ts[0].shape[-2:])


OLD_TORCH = int(torch.__version__.split(".")[0]) < 2


def old_torch_quirk(case):
    """Corners where torch 1.13 differs from torch 2 (which ptc follows): a
    Python bool as the other operand (rsub, remainder and bitwise ops accept
    it or promote it to int64), argmax/argmin of empty bool tensors, and
    baddbmm with beta=0 (1.13 returns nan where it should ignore self)."""
    if not OLD_TORCH:
        return False
    x = case.args[0]
    return ((case.op in BINARY and isinstance(case.args[1], bool)) or
            (case.op in ("argmax", "argmin") and isinstance(x, torch.Tensor) and
             x.dtype == torch.bool) or
            (case.op == "baddbmm" and case.kwargs.get("beta") == 0))


def check_cases(cases, batch=150):
    """Runs cases through ptc-run in batches and asserts every output matches."""
    cases = [c for c in cases if c is not None and not meta_gap(c) and not old_torch_quirk(c)]
    assert cases, "no case was generated"
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for start in range(0, len(cases), batch):
            chunk = cases[start:start + batch]
            outs, err = run_graph(chunk, tmp)
            if outs is None:  # find the culprits one by one
                for c in chunk:
                    o, e = run_graph([c], tmp)
                    if o is None:
                        failures.append("%s: ptc-run failed: %s" % (describe(c),
                                                                     e.splitlines()[0]))
                    else:
                        failures += check_outputs(c, o[0])
                continue
            for c, o in zip(chunk, outs):
                failures += check_outputs(c, o)
    assert not failures, "%d of %d cases differ from torch:\n%s" % (
        len(failures), len(cases), "\n".join(failures[:25]))
    return len(cases)


def check_outputs(case, outs):
    msgs = []
    for j, (g, w) in enumerate(zip(outs, case.want)):
        m = compare(case, g, w)
        if m:
            msgs.append("%s -> output %d %s" % (describe(case), j, m))
    return msgs


# ---- inputs -------------------------------------------------------------------------

SHAPES = [(), (1,), (5,), (0,), (3, 4), (2, 1, 3), (4, 0), (1, 1), (2, 3, 2)]


class Gen:
    """Random tensors for one op, reproducible from its name."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.g = torch.Generator().manual_seed(self.rng.randrange(1 << 30))

    def values(self, shape, dtype, low=None, high=None, special=False, nonzero=False):
        """special: put nan, inf, -inf and 0 in (a tuple: those values)."""
        if dtype == torch.bool:
            return torch.rand(shape, generator=self.g) < 0.5
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=self.g, dtype=torch.float64) * 2
            if low is not None:
                t = low + (high - low) * torch.rand(shape, generator=self.g, dtype=torch.float64)
            if special and t.numel() >= 4:
                flat = t.view(-1)
                specials = special if isinstance(special, tuple) else (math.nan, math.inf,
                                                                       -math.inf, 0.0)
                for v in specials:
                    flat[self.rng.randrange(flat.numel())] = v
            if nonzero:
                t[t == 0] = 1
            return t.to(dtype)
        lo, hi = (0, 16) if dtype == torch.uint8 else (-8, 8)
        if low is not None:
            lo, hi = int(low), int(high)
        t = torch.randint(lo, hi, shape, generator=self.g, dtype=torch.int64)
        if nonzero:
            t[t == 0] = 1
        return t.to(dtype)

    def shape(self, max_dims=4):
        """A random shape, zero-size and size-1 dims included."""
        ndim = self.rng.randint(0, max_dims)
        return tuple(self.rng.choice([0, 1, 1, 2, 3, 5]) for _ in range(ndim))

    def broadcast_pair(self):
        """Two random shapes that broadcast together."""
        out = self.shape()
        a = tuple(d if self.rng.random() < 0.7 else 1 for d in out)
        b = tuple(d if self.rng.random() < 0.7 else 1 for d in out)
        return a[self.rng.randint(0, len(a)):] if self.rng.random() < 0.3 else a, b

    def tensor(self, shape, dtype, layout=None, **kw):
        """A tensor of `shape`, contiguous or (layout 't') a transposed view or
        (layout 's') a strided slice of a larger one."""
        shape = tuple(shape)
        if layout is None:
            layout = self.rng.choice(["c", "c", "t", "s"])
        if layout == "t" and len(shape) >= 2:
            swapped = shape[:-2] + (shape[-1], shape[-2])
            return self.values(swapped, dtype, **kw).transpose(-1, -2)
        if layout == "s" and len(shape) >= 1:
            wide = shape[:-1] + (2 * shape[-1],)
            return self.values(wide, dtype, **kw)[..., ::2]
        return self.values(shape, dtype, **kw)


def gen_for(name):
    return Gen(sum(ord(c) * (i + 1) for i, c in enumerate(name)))


# ---- pointwise ----------------------------------------------------------------------

UNARY = {
    "abs": [{}], "neg": [{}], "relu": [{}], "floor": [{}], "ceil": [{}], "trunc": [{}],
    "sign": [{}], "round": [{}, {"decimals": 2}, {"decimals": -1}],
    "hardtanh": [{}, {"args": (-0.5, 2.0)}, {"args": (-2, 3)}],
    "exp": [{}], "log": [{}], "log1p": [{}], "expm1": [{}], "sqrt": [{}], "rsqrt": [{}],
    "sin": [{}], "cos": [{}], "tan": [{}], "asin": [{}], "acos": [{}], "sinh": [{}],
    "cosh": [{}], "tanh": [{}], "sigmoid": [{}], "erf": [{}], "reciprocal": [{}],
    "logit": [{}, {"eps": 0.1}, {"eps": 0.0}], "frac": [{}],
    "gelu": [{}, {"approximate": "tanh"}], "silu": [{}], "hardswish": [{}], "hardsigmoid": [{}],
    "leaky_relu": [{}, {"args": (0.2,)}], "elu": [{}, {"args": (0.5, 2.0, 1.5)}],
    "softplus": [{}, {"args": (2.0, 1.0)}], "logical_not": [{}], "isnan": [{}],
    "bitwise_not": [{}],
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    gen, cases = gen_for(op), []
    for dtype in ALL:
        for shape in SHAPES + [gen.shape(), gen.shape()]:
            for variant in UNARY[op]:
                kw = dict(variant)
                extra = kw.pop("args", ())
                # torch's f32/bf16 gelu(inf) is nan (its vectorised erf); the
                # reference gives the limit, inf
                special = (math.nan, 0.0) if op == "gelu" else True
                x = gen.tensor(shape, dtype, special=special)
                cases.append(make_case(op, (x,) + tuple(extra), kw))
    check_cases(cases)


BINARY = ["add", "sub", "rsub", "mul", "div", "pow", "remainder", "fmod", "maximum", "minimum", "atan2", "logaddexp",
          "copysign",
          "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
          "bitwise_and", "bitwise_or", "bitwise_xor"]
BCAST = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((0, 3), (1, 3)), ((5,), ()),
         ((), ()), ((1,), (2, 3))]
MIXED = [(torch.int32, torch.float16), (torch.uint8, torch.int8), (torch.bool, torch.float32),
         (torch.int64, torch.bfloat16), (torch.float16, torch.float64), (torch.bool, torch.int16)]
SCALARS = [3, -2, 2.5, True]


@pytest.mark.parametrize("op", BINARY)
def test_binary(op):
    gen, cases = gen_for(op), []
    divides = op in ("div", "remainder", "fmod")
    kws = [{}]
    if op in ("add", "sub", "rsub"):
        kws = [{}, {"alpha": 2}, {"alpha": 0.5}]
    if op == "div":
        kws = [{}, {"rounding_mode": "trunc"}, {"rounding_mode": "floor"}]
    pairs = [(d, d) for d in ALL] + MIXED + [(b, a) for a, b in MIXED]
    for kw in kws:
        ref = rounded_div if kw.get("rounding_mode") else None
        for da, db in pairs:
            for sa, sb in BCAST + [gen.broadcast_pair()]:
                a = gen.tensor(sa, da, special=True)
                b = gen.tensor(sb, db, special=not divides, nonzero=divides)
                if op == "pow" and not db.is_floating_point and not da.is_floating_point:
                    b = b.abs() if db != torch.bool else b
                cases.append(make_case(op, (a, b), kw, ref=ref))
            for s in SCALARS:
                a = gen.tensor((3, 2), da, special=True)
                cases.append(make_case(op, (a, s), kw, ref=ref))
    if op == "pow":  # a Python number as the base
        for d in ALL:
            cases.append(make_case(op, (2, gen.tensor((2, 3), d, low=0, high=4))))
            cases.append(make_case(op, (1.5, gen.tensor((4,), d))))
    check_cases(cases)


def rounded_div(a, b, rounding_mode):
    """torch.div with rounding; f16/bf16 computed in f32 and rounded once (torch
    rounds the quotient to the reduced dtype before truncating or flooring)."""
    out = aten.div(a, b, rounding_mode=rounding_mode)
    if out.dtype in (torch.float16, torch.bfloat16):
        up = lambda t: t.float() if isinstance(t, torch.Tensor) else t
        out = aten.div(up(a), up(b), rounding_mode=rounding_mode).to(out.dtype)
    return out


def test_integer_division_by_zero_fails_like_torch(tmp_path):
    a = torch.tensor([4, 5], dtype=torch.int64)
    b = torch.tensor([2, 0], dtype=torch.int64)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.div(a, b, rounding_mode="floor")
    case = Case("div", (a, b), {"rounding_mode": "floor"}, torch.zeros(2, dtype=torch.int64))
    outs, err = run_graph([case], str(tmp_path))
    assert outs is None and "ZeroDivisionError" in err and "div(" in err


def test_where():
    gen, cases = gen_for("where"), []
    for da, db in [(d, d) for d in ALL] + MIXED:
        for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ()), ((0, 2), (1, 2), (2,)),
                           ((), (2, 2), (1,))]:
            c = gen.tensor(sc, torch.bool)
            cases.append(make_case("where", (c, gen.tensor(sa, da), gen.tensor(sb, db)),
                                   ref=torch.where))
        c = gen.tensor((2, 3), torch.bool)
        for s in SCALARS:
            cases.append(make_case("where", (c, gen.tensor((2, 3), da), s), ref=torch.where))
            cases.append(make_case("where", (c, s, gen.tensor((3,), da)), ref=torch.where))
    check_cases(cases)


def test_prims_where():
    gen, cases = gen_for("prims.where"), []
    for d in ALL:
        for shape in SHAPES:
            c, a, b = gen.tensor(shape, torch.bool), gen.tensor(shape, d), gen.tensor(shape, d)
            cases.append(make_case("prims.where", (c, a, b), ref=torch.where))
    check_cases(cases)


def test_clamp():
    gen, cases = gen_for("clamp"), []
    for d in ALL:
        for lo, hi in [(-1, 2), (0.5, None), (None, 1.5), (2, -1), (math.nan, 1.0)]:
            x = gen.tensor((3, 5), d, special=True)
            cases.append(make_case("clamp", (x, lo, hi)))
        for shape in [(3, 4), (0, 2), ()]:
            x = gen.tensor(shape, d, special=True)
            lo = gen.tensor(shape[-1:], d, special=True)
            hi = gen.tensor((), d)
            cases.append(make_case("clamp", (x, lo, hi)))
            cases.append(make_case("clamp", (x, None, lo)))
    check_cases(cases)


def test_masked_fill():
    gen, cases = gen_for("masked_fill"), []
    for d in ALL:
        for sx, sm in [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 0), (1, 0)), ((), ())]:
            x, m = gen.tensor(sx, d), gen.tensor(sm, torch.bool)
            for v in [0, -1.5, True, gen.tensor((), d)]:
                cases.append(make_case("masked_fill", (x, m, v)))
    check_cases(cases)


def test_to():
    gen, cases = gen_for("to"), []
    for src in ALL:
        for dst in ALL:
            x = gen.tensor((3, 4), src, special=True, low=None)
            if src.is_floating_point and not dst.is_floating_point:
                x = x.nan_to_num(0, 0, 0) * (3 if dst == torch.bool else 1)
                if dst == torch.uint8:
                    x = x.abs()
            cases.append(make_case("to", (x,), {"dtype": dst}, ref=lambda t, dtype: t.to(dtype)))
            cases.append(make_case("prims.convert_element_type", (x, dst),
                                   ref=lambda t, dt: t.to(dt)))
    cases.append(make_case("prims.device_put", (gen.tensor((2, 3), torch.float32),
                                                CPU),
                           ref=lambda t, dev: t.clone()))
    for d in FLOATS:
        cases.append(make_case("prims.stop_gradient", (gen.tensor((2, 3), d, special=True),),
                               ref=lambda t: t.clone()))
    check_cases(cases)


def test_triu_tril():
    gen, cases = gen_for("tri"), []
    for op in ("triu", "tril"):
        for d in ALL:
            for shape in [(3, 4), (2, 4, 3), (0, 2), (1, 1)]:
                for diag in (0, 1, -2):
                    cases.append(make_case(op, (gen.tensor(shape, d), diag)))
    check_cases(cases)


# ---- prims: pointwise ---------------------------------------------------------------

PRIM_UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "log": torch.log,
    "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "erf": torch.erf,
    "reciprocal": torch.reciprocal, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "trunc": torch.trunc, "sign": torch.sign,
    "bitwise_not": torch.bitwise_not, "logical_not": torch.logical_not, "isnan": torch.isnan,
}
# prims keep their operand's dtype: integer operands only where that is exact
PRIM_UNARY_INTS = {"abs", "neg", "sign", "bitwise_not", "logical_not", "isnan"}


@pytest.mark.parametrize("name", sorted(PRIM_UNARY))
def test_prims_unary(name):
    gen, cases = gen_for("prims." + name), []
    dtypes = ALL if name in PRIM_UNARY_INTS else FLOATS
    for d in dtypes:
        for shape in SHAPES:
            cases.append(make_case("prims." + name, (gen.tensor(shape, d, special=True),),
                                   ref=PRIM_UNARY[name]))
    check_cases(cases)


def trunc_div(a, b):
    if a.dtype.is_floating_point:
        return torch.true_divide(a, b)
    return torch.div(a, b, rounding_mode="trunc")


PRIM_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": trunc_div,
    "floor_divide": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "remainder": torch.remainder, "fmod": torch.fmod, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2, "copysign": torch.copysign,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor, "eq": torch.eq,
    "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
}


@pytest.mark.parametrize("name", sorted(PRIM_BINARY))
def test_prims_binary(name):
    gen, cases = gen_for("prims." + name), []
    divides = name in ("div", "floor_divide", "remainder", "fmod")
    for d in ALL:
        if name in ("atan2", "copysign") and not d.is_floating_point:
            continue
        for shape in SHAPES:
            a = gen.tensor(shape, d, special=True)
            b = gen.tensor(shape, d, special=not divides, nonzero=divides)
            if name == "pow" and not d.is_floating_point and d != torch.bool:
                b = b.abs()
            ref = PRIM_BINARY[name]
            c = make_case("prims." + name, (a, b), ref=ref)
            if c is not None and c.want[0].dtype not in (a.dtype, torch.bool):
                continue  # torch promotes; the prim is only defined without promotion
            cases.append(c)
    check_cases(cases)


# ---- reductions -----------------------------------------------------------------------

RSHAPES = [((3, 4), [1]), ((3, 4), [0, 1]), ((2, 3, 4), [0, 2]), ((2, 3, 4), [-1]),
           ((0, 3), [0]), ((0, 3), [1]), ((), []), ((5,), [0]), ((2, 1, 3), [1])]


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "logsumexp", "any", "all"])
def test_reduce(op):
    gen, cases = gen_for(op), []
    for d in ALL:
        for shape, dims in RSHAPES:
            for keep in (False, True):
                x = gen.tensor(shape, d, special=d.is_floating_point and op != "logsumexp")
                if op == "logsumexp" and not dims:
                    continue
                if op in ("any", "all"):
                    ref = lambda t, dims, keep: reduce_seq(torch.any if op == "any" else torch.all,
                                                           t, dims, keep)
                    cases.append(make_case(op, (x, dims, keep), ref=ref))
                    continue
                cases.append(make_case(op, (x, dims, keep), exact_math=True))
                if op in ("sum", "mean") and d in (torch.int32, torch.float16, torch.bool):
                    cases.append(make_case(op, (x, dims, keep), {"dtype": torch.float64}))
        if op in ("any", "all"):
            cases.append(make_case(op, (gen.tensor((2, 3), d), []),
                                   ref=lambda t, dims: reduce_seq(getattr(torch, op), t, dims,
                                                                  False)))
        if op in ("sum", "mean", "any", "all"):
            x = gen.tensor((2, 3), d)
            ref = None
            if op in ("any", "all"):
                ref = lambda t, dim=None: reduce_seq(getattr(torch, op), t, [0, 1], False)
            cases.append(make_case(op, (x,), ref=ref))
    check_cases(cases)


def reduce_seq(fn, t, dims, keep):
    """any/all over a list of dims, one dim at a time (torch 1.13 has no
    any.dims). An empty list reduces nothing, as aten.any.dims does."""
    out = t if t.dtype == torch.uint8 else t
    if t.dim() == 0:
        return fn(t)
    for d in sorted((d % t.dim() for d in dims), reverse=True):
        out = fn(out, d, keepdim=keep)
    if not dims:
        out = out.to(torch.uint8 if t.dtype == torch.uint8 else torch.bool).clone()
        out = (t != 0).to(out.dtype)
    return out


def test_prod():
    gen, cases = gen_for("prod"), []
    for d in ALL:
        for shape, dim in [((3, 4), 1), ((2, 3, 4), 0), ((0, 3), 0), ((5,), 0), ((), 0)]:
            for keep in (False, True):
                x = gen.tensor(shape, d, special=True)
                cases.append(make_case("prod", (x, dim, keep), exact_math=True))
        cases.append(make_case("prod", (gen.tensor((2, 3), d),)))
        cases.append(make_case("prod", (gen.tensor((3,), d),), {"dtype": torch.float64}))
    check_cases(cases)


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_std(op):
    gen, cases = gen_for(op), []
    for d in FLOATS:
        for shape, dims in RSHAPES:
            for corr in (None, 0, 2):
                x = gen.tensor(shape, d)
                kw = {"correction": corr, "keepdim": True} if corr is not None else {}
                cases.append(make_case(op, (x, dims), kw, tol={torch.float32: (1e-4, 1e-5)},
                                       exact_math=True))
        cases.append(make_case(op, (gen.tensor((4, 5), d),)))
    check_cases(cases)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argreduce(op):
    gen, cases = gen_for(op), []
    for d in ALL:
        for shape, dim in [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1), ((5,), 0), ((), 0),
                           ((0, 3), 1)]:
            for keep in (False, True):
                x = gen.tensor(shape, d, special=True, low=-3, high=3)
                cases.append(make_case(op, (x, dim, keep)))
        cases.append(make_case(op, (gen.tensor((3, 4), d, low=-3, high=3),)))
    check_cases(cases)


def test_cumsum():
    gen, cases = gen_for("cumsum"), []
    for d in ALL:
        for shape, dim in [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1), ((0, 3), 0), ((), 0)]:
            x = gen.tensor(shape, d)
            cases.append(make_case("cumsum", (x, dim), exact_math=True))
            cases.append(make_case("cumsum", (x, dim), {"dtype": torch.float64}))
    check_cases(cases)


def test_cumprod_sort():
    gen, cases = gen_for("cumprod"), []
    for d in ALL:
        for shape, dim in [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1), ((0, 3), 0), ((), 0)]:
            x = gen.tensor(shape, d, low=-2, high=2)
            cases.append(make_case("cumprod", (x, dim), exact_math=True))
            cases.append(make_case("cumprod", (x, dim), {"dtype": torch.float64}))
            for desc in (False, True):  # ties from the narrow range, nan and inf from special
                y = gen.tensor(shape, d, low=-2, high=2, special=d.is_floating_point)
                cases.append(make_case("sort", (y,), {"dim": dim, "descending": desc,
                                                      "stable": True},
                                       ref=lambda a, **kw: tuple(torch.sort(a, **kw))))
            if d.is_floating_point and d.itemsize >= 4:  # distinct values: no ties to order
                z = torch.randperm(max(x.numel(), 1))[:x.numel()].reshape(shape).to(d)
                size = shape[dim] if shape else 1
                cases.append(make_case("topk", (z, min(2, size)), {"dim": dim, "largest": desc},
                                       ref=lambda a, k, **kw: tuple(torch.topk(a, k, **kw))))
            y = gen.tensor(shape, d, low=-2, high=2, special=d.is_floating_point)
            cases.append(make_case("cummax", (y, dim), ref=lambda a, k: tuple(torch.cummax(a, k))))
            cases.append(make_case("cummin", (y, dim), ref=lambda a, k: tuple(torch.cummin(a, k))))
    check_cases(cases)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op):
    gen, cases = gen_for(op), []
    for d in ALL:
        for shape, dim in [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1), ((0, 3), 1), ((), 0),
                           ((1, 5), 1)]:
            x = gen.tensor(shape, d)
            if d.is_floating_point:  # torch accepts integers only when empty
                cases.append(make_case(op, (x, dim, None), exact_math=True))
            cases.append(make_case(op, (x, dim, torch.float64)))
        x = torch.tensor([[0.0, -math.inf], [-math.inf, -math.inf], [math.nan, 1]]).to(d)
        cases.append(make_case(op, (x, 1, None)))
    check_cases(cases)


# prims reduce exactly the dims listed: [] reduces nothing
PRIM_REDUCE = {
    "sum": lambda a, dims: torch.sum(a, dims, dtype=a.dtype) if dims else a.clone(),
    "prod": lambda a, dims: prod_dims(a, dims),
    "amax": lambda a, dims: torch.amax(a, dims) if dims else a.clone(),
    "amin": lambda a, dims: torch.amin(a, dims) if dims else a.clone(),
}


def prod_dims(a, dims):
    out = a
    for d in sorted(dims, reverse=True):
        out = torch.prod(out, d, dtype=a.dtype)
    return out


@pytest.mark.parametrize("name", sorted(PRIM_REDUCE))
def test_prims_reduce(name):
    gen, cases = gen_for("prims." + name), []
    for d in ALL if name in ("amax", "amin") else ALL[1:]:  # no bool sum/prod prims
        for shape, dims in [((3, 4), [1]), ((3, 4), [0, 1]), ((2, 3, 4), [0, 2]), ((0, 3), [1]),
                            ((5,), [0]), ((2, 3), [])]:
            x = gen.tensor(shape, d, special=True)
            cases.append(make_case("prims." + name, (x, dims), ref=PRIM_REDUCE[name],
                                   exact_math=True))
    check_cases(cases)


def var_mean_ref(a, dims, c):
    return torch.var(a, dims, correction=int(c)), torch.mean(a, dims)


@pytest.mark.filterwarnings("ignore::UserWarning")  # var with correction >= n
def test_prims_argreduce_var_mean_cumsum():
    gen, cases = gen_for("prims.arg"), []
    for d in ALL:
        for shape, dim in [((3, 4), 1), ((2, 3, 4), 0), ((5,), 0)]:
            x = gen.tensor(shape, d, low=-3, high=3)
            cases.append(make_case("prims.argmax", (x, dim), ref=torch.argmax))
            cases.append(make_case("prims.argmin", (x, dim), ref=torch.argmin))
            cases.append(make_case("prims.cumsum", (x, dim),
                                   ref=lambda a, dim: torch.cumsum(a, dim, dtype=a.dtype),
                                   exact_math=True))
            cases.append(make_case("prims.cumprod", (x, dim),
                                   ref=lambda a, dim: torch.cumprod(a, dim, dtype=a.dtype),
                                   exact_math=True))
    for d in FLOATS:
        for shape, dims in [((3, 4), [1]), ((2, 3, 4), [0, 2]), ((0, 3), [1])]:
            for corr in (0.0, 1.0):
                x = gen.tensor(shape, d)
                cases.append(make_case("prims.var_mean", (x, dims, corr),
                                       ref=var_mean_ref))
    check_cases(cases)


# ---- normalisation and dropout --------------------------------------------------------

NORM_TOL = {torch.float32: (1e-4, 1e-5)}
NORM = {"tol": NORM_TOL, "exact_math": True}


def test_layer_norm():
    gen, cases = gen_for("layer_norm"), []
    for d in FLOATS:
        for shape, norm in [((3, 4), [4]), ((2, 3, 4), [3, 4]), ((0, 5), [5]), ((2, 1), [1])]:
            x = gen.tensor(shape, d)
            w, b = gen.tensor(norm, d), gen.tensor(norm, d)
            cases.append(make_case("layer_norm", (x, norm, w, b), **NORM))
            cases.append(make_case("layer_norm", (x, norm, None, None, 1e-3), **NORM))
    check_cases(cases)


def test_group_norm():
    gen, cases = gen_for("group_norm"), []
    for d in FLOATS:
        for shape, groups in [((2, 4, 3), 2), ((1, 6, 2, 2), 3), ((3, 4), 1), ((2, 4, 5), 4)]:
            x = gen.tensor(shape, d)
            w, b = gen.tensor(shape[1:2], d), gen.tensor(shape[1:2], d)
            cases.append(make_case("group_norm", (x, groups, w, b), **NORM))
            cases.append(make_case("group_norm", (x, groups, None, None, 0.1), **NORM))
    check_cases(cases)


def batch_norm_ref(x, w, b, rm, rv, training, momentum, eps):
    rm2 = rm.clone() if rm is not None else None
    rv2 = rv.clone() if rv is not None else None
    out = F.batch_norm(x, rm2, rv2, w, b, training, momentum, eps)
    return (out, rm2, rv2) if rm is not None and training else out


def test_batch_norm():
    gen, cases = gen_for("batch_norm"), []
    for d in FLOATS:
        for shape in [(4, 3), (2, 3, 5), (2, 2, 3, 3)]:
            x = gen.tensor(shape, d)
            c = shape[1]
            w, b = gen.tensor((c,), d), gen.tensor((c,), d)
            rm, rv = gen.tensor((c,), d), gen.tensor((c,), d, low=0.5, high=2)
            for training in (True, False):
                cases.append(make_case("batch_norm", (x, w, b, rm, rv, training, 0.1, 1e-5),
                                       ref=batch_norm_ref, **NORM))
            cases.append(make_case("batch_norm", (x, None, None, None, None, True, 0.1, 1e-5),
                                   ref=batch_norm_ref, **NORM))
    check_cases(cases)


# ---- the counter-based RNG of ops.h ---------------------------------------------------

M64 = (1 << 64) - 1


def rng_mix(x):
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & M64
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & M64
    x ^= x >> 31
    return x


def rng_key(seed, offset=0):
    return rng_mix((seed * 0x9e3779b97f4a7c15 + offset) & M64)


def rng_uniform(key, n):
    """Draws 0..n-1 as a float32 tensor (exact: 24-bit values)."""
    return torch.tensor([(rng_mix((key + i) & M64) >> 40) / 16777216.0 for i in range(n)],
                        dtype=torch.float32)


def rng_normal(key, n):
    u = rng_uniform(key, 2 * n)
    u0, u1 = u[0::2], u[1::2]
    return torch.sqrt(-2.0 * torch.log(1.0 - u0)) * torch.cos(6.2831853071795864769 * u1)


def dropout_ref(x, p, seed):
    if p == 1:
        return x * 0
    key = rng_key(seed)
    keep = rng_uniform(key, x.numel()).double() < 1.0 - p
    scale = 1.0 / (1.0 - p)
    return (x.double().reshape(-1) * keep.double() * scale).reshape(x.shape).to(x.dtype)


def test_dropout():
    gen, cases = gen_for("dropout"), []
    for d in FLOATS:
        for shape in [(30, 40), (0, 3), (7,)]:
            x = gen.tensor(shape, d)
            for p, train in [(0.25, True), (0.5, False), (0.0, True), (1.0, True)]:
                cases.append(make_case("dropout", (x, p, train), {"seed": 11},
                                       ref=lambda t, p, tr, seed: dropout_ref(t, p, seed) if tr
                                       else t.clone(), **NORM))
    n = check_cases(cases)
    assert n > 10
    # the mask keeps about 1 - p of a large tensor
    key = rng_key(11)
    assert abs(float((rng_uniform(key, 20000) < 0.75).float().mean()) - 0.75) < 0.01


def test_rand_randn_follow_the_shared_rng(tmp_path):
    cases = []
    for d in FLOATS:
        for op in ("rand", "randn"):
            for shape in [(50, 40), (0,), ()]:
                n = int(torch.tensor(shape).prod()) if shape else 1
                vals = (rng_uniform if op == "rand" else rng_normal)(rng_key(5), n)
                want = vals.reshape(shape).to(d)
                tol = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-5, 1e-6)}
                cases.append(Case(op, (list(shape),), {"dtype": d, "seed": 5}, want, tol))
                cases.append(Case("prims." + op, (list(shape),),
                                  {"dtype": d, "device": CPU, "seed": 5}, want,
                                  tol))
    check_cases(cases)
    u = rng_uniform(rng_key(5), 20000)
    z = rng_normal(rng_key(5), 20000)
    assert abs(float(u.mean()) - 0.5) < 0.01 and float(u.max()) < 1
    assert abs(float(z.mean())) < 0.03 and abs(float(z.std()) - 1) < 0.03


# ---- matrix products and attention ------------------------------------------------------

MM_TOL = {torch.float32: (1e-4, 1e-5)}
MM = {"tol": MM_TOL, "exact_math": True}
MM_DTYPES = [torch.int64, torch.int32] + FLOATS


def test_matmul_family():
    gen, cases = gen_for("matmul"), []
    for d in MM_DTYPES:
        t = lambda *s: gen.tensor(s, d, low=-2, high=2) if d.is_floating_point else \
            gen.tensor(s, d, low=-3, high=3)
        cases.append(make_case("mm", (t(3, 4), t(4, 5)), **MM))
        cases.append(make_case("mm", (t(0, 4), t(4, 2)), **MM))
        cases.append(make_case("mm", (t(2, 0), t(0, 3)), **MM))
        cases.append(make_case("bmm", (t(2, 3, 4), t(2, 4, 1)), **MM))
        for sa, sb in [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((2, 3, 4), (4, 5)),
                       ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((1, 0, 2), (2, 3))]:
            cases.append(make_case("matmul", (t(*sa), t(*sb)), **MM))
        for beta, alpha in [(1, 1), (0.5, 2.0), (0, 1)] if d.is_floating_point else [(1, 1),
                                                                                      (2, 3)]:
            cases.append(make_case("addmm", (t(3, 5), t(3, 4), t(4, 5)),
                                   {"beta": beta, "alpha": alpha}, **MM))
            cases.append(make_case("addmm", (t(5), t(3, 4), t(4, 5)),
                                   {"beta": beta, "alpha": alpha}, **MM))
            cases.append(make_case("baddbmm", (t(2, 3, 5), t(2, 3, 4), t(2, 4, 5)),
                                   {"beta": beta, "alpha": alpha}, **MM))
        for sx, sw, sb in [((3, 4), (5, 4), (5,)), ((2, 3, 4), (5, 4), None), ((4,), (5, 4), (5,)),
                           ((3, 4), (4,), ()), ((0, 4), (2, 4), (2,))]:
            bias = t(*sb) if sb is not None else None
            cases.append(make_case("linear", (t(*sx), t(*sw), bias), **MM))
    check_cases(cases)


def sdpa_dropout_ref(q, k, v, mask, p, causal, scale, seed):
    """Math attention with ops.h's dropout mask over the (..., L, S) weights."""
    s = q.double() @ k.double().transpose(-2, -1) * (scale or 1 / math.sqrt(q.shape[-1]))
    w = torch.softmax(s, -1)
    key = rng_key(seed)
    keep = rng_uniform(key, w.numel()).double().reshape(w.shape) < 1 - p
    return ((w * keep / (1 - p)) @ v.double()).to(q.dtype)


@pytest.mark.skipif(not HAS_SDPA, reason="torch has no F.scaled_dot_product_attention")
def test_sdpa():
    gen, cases = gen_for("sdpa"), []
    sdpa = F.scaled_dot_product_attention
    op = "scaled_dot_product_attention"
    for d in FLOATS:
        t = lambda *s: gen.tensor(s, d, layout="c")
        for B, L, S, E, Ev in [((2,), 3, 4, 5, 2), ((2, 3), 1, 5, 4, 4), ((), 4, 4, 3, 3)]:
            q, k, v = t(*B, L, E), t(*B, S, E), t(*B, S, Ev)
            cases.append(make_case(op, (q, k, v), ref=sdpa, **MM))
            cases.append(make_case(op, (q, k, v), {"is_causal": True},
                                   ref=lambda *a, **kw: sdpa(*a, **kw), **MM))
            cases.append(make_case(op, (q, k, v), {"scale": 0.3}, ref=sdpa, **MM))
            bmask = gen.tensor((L, S), torch.bool, layout="c")
            bmask[0] = False  # a fully masked row: zeros in torch 2
            cases.append(make_case(op, (q, k, v, bmask), ref=sdpa, **MM))
            cases.append(make_case(op, (q, k, v, t(L, S)), ref=sdpa, **MM))
        q, k, v = t(2, 3, 4), t(2, 5, 4), t(2, 5, 4)
        cases.append(make_case(op, (q, k, v, None, 0.3), {"seed": 4},
                               ref=lambda q, k, v, m, p, seed: sdpa_dropout_ref(
                                   q, k, v, m, p, False, None, seed), **MM))
    check_cases(cases)


# ---- convolution and pooling -------------------------------------------------------------

CONV_TOL = {torch.float32: (1e-4, 1e-4)}
CONV = {"tol": CONV_TOL, "exact_math": True}


def conv_weight_grad(g, x, w, stride, padding, dilation, groups):
    return conv_grads(g, x, w, stride, padding, dilation, groups)[1]


def conv_grads(g, x, w, stride, padding, dilation, groups):
    return aten.convolution_backward(g, x, w, None, stride, padding, dilation, False,
                                     [0] * len(stride), groups, [True, True, False])[:2]


def test_convolution():
    gen, cases = gen_for("convolution"), []
    for d in FLOATS:
        t = lambda *s: gen.tensor(s, d)
        for nsp in (1, 2, 3):
            for stride, pad, dil, groups in [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2),
                                             (3, 1, 1, 4)]:
                sp = [5, 4, 3][:nsp]
                x = t(2, 4, *sp)
                w = t(4, 4 // groups, *([2] * nsp))
                b = t(4)
                args = (x, w, b, [stride] * nsp, [pad] * nsp, [dil] * nsp)
                cases.append(make_case("convolution", args + (False, [0] * nsp, groups),
                                       **CONV))
                cases.append(make_case("conv%dd" % nsp, args + (groups,), **CONV))
                y = aten.convolution(x.double(), w.double(), None, *args[3:], False,
                                     [0] * nsp, groups)
                gy = t(*y.shape)
                cases.append(make_case("convolution_backward_weight",
                                       (gy, x, w) + args[3:] + (groups,),
                                       ref=conv_weight_grad, **CONV))
                cases.append(make_case("convolution_backward", (gy, x, w) + args[3:] + (groups,),
                                       ref=conv_grads, **CONV))
                # transposed: weight (in, out/groups, k...)
                wt = t(4, 6 // groups if groups != 4 else 1, *([2] * nsp))
                op = min(stride, dil) - 1
                cases.append(make_case("convolution", (x, wt, None, [stride] * nsp, [pad] * nsp,
                                                       [dil] * nsp, True, [op] * nsp, groups),
                                       **CONV))
                if nsp == 2:
                    cases.append(make_case("conv_transpose2d", (x, wt, None, stride, pad, op,
                                                                groups, dil), **CONV))
        cases.append(make_case("conv2d", (t(3, 5, 5), t(2, 3, 3, 3)), **CONV))  # no batch
        cases.append(make_case("conv2d", (t(0, 3, 5, 5), t(2, 3, 3, 3)), **CONV))
        cases.append(make_case("conv1d", (t(1, 2, 7), t(3, 2, 3), None, 2, 0, 3), **CONV))
    check_cases(cases)


def test_pooling():
    gen, cases = gen_for("pool"), []
    for d in FLOATS + [torch.int64]:
        t = lambda *s: gen.tensor(s, d, special=(math.nan,) if d.is_floating_point else False)
        for shape in [(2, 3, 7, 6), (3, 5, 5), (1, 1, 1, 1), (1, 2, 0, 3)]:
            x = t(*shape)
            for k, s, p, dil, ceil in [(2, [], 0, 1, False), (3, 2, 1, 1, True),
                                       (3, 2, 1, 2, False), ([2, 3], [1, 2], [1, 0], 1, True),
                                       (1, 1, 0, 1, False)]:
                cases.append(make_case("max_pool2d", (x, k, s, p, dil, ceil)))
                cases.append(make_case("max_pool2d_with_indices", (x, k, s, p, dil, ceil)))
                for cip in (True, False):
                    cases.append(make_case("avg_pool2d", (x, k, s, p, ceil, cip), **CONV))
                cases.append(make_case("avg_pool2d", (x, k, s, p, ceil, True, 2), **CONV))
            for out in [(1, 1), (2, 3), (4, 4), (7, 6)]:
                cases.append(make_case("adaptive_avg_pool2d", (x, list(out)), **CONV))
    check_cases(cases)


# ---- shapes ----------------------------------------------------------------------------


def squeeze_ref(x, dims=None):
    if dims is None:
        return x.squeeze().clone()
    out = x
    for d in sorted((d % max(x.dim(), 1) for d in dims), reverse=True):
        out = out.squeeze(d)
    return out.clone()


def test_views():
    gen, cases = gen_for("views"), []
    for d in ALL:
        x = gen.tensor((2, 3, 4), d)
        e = gen.tensor((0, 3), d)
        c = lambda op, *a, **kw: cases.append(make_case(op, a, kw.pop("kw", None),
                                                        ref=kw.pop("ref", None)))
        c("view", x.contiguous(), [4, 6])
        c("view", e, [3, 0])
        c("reshape", x, [-1, 4])
        c("reshape", e, [0, 1, 3])
        c("permute", x, [2, 0, 1])
        c("transpose", x, 0, -1)
        c("t", gen.tensor((3, 5), d))
        c("t", gen.tensor((4,), d))
        c("expand", gen.tensor((3, 1), d), [2, 3, 4])
        c("expand", gen.tensor((1,), d), [-1])
        c("squeeze", gen.tensor((1, 3, 1), d), ref=squeeze_ref)
        c("squeeze", gen.tensor((1, 3, 1), d), [0, 2], ref=squeeze_ref)
        c("squeeze", gen.tensor((1, 3, 1), d), [1], ref=squeeze_ref)
        c("unsqueeze", x, -1)
        c("unsqueeze", gen.tensor((), d), 0)
        c("flatten", x, 1)
        c("flatten", gen.tensor((), d))
        c("slice", x, 2, 1, None, 2)
        c("slice", x, -1, -3, -1)
        c("slice", x, 0, 5, 10)
        c("slice", e, 1, 1, 100, 3)
        c("select", x, 1, -1)
        c("select", x, 2, 0)
        c("narrow", x, -1, 1, 2)
        c("narrow", x, 0, -1, 1)
        c("contiguous", x, ref=lambda t: t.contiguous())
        c("clone", x)
        c("constant_pad_nd", x, [1, 2], 0.5)
        c("constant_pad_nd", x, [0, -1, 2, 0, 1, 1], -3)
        c("constant_pad_nd", e, [1, 1, 0, 2])
        c("repeat", gen.tensor((2, 3), d), [2, 1, 3])
        c("repeat", e, [2, 2])
        c("roll", x, [1, -2], [0, 2])
        c("roll", x, [5])
        c("roll", x, [2, 1], [1, 1])
        for dims in ([0, 1, 2], [0, 2, 1]):
            c("prims.permute", x, dims, ref=lambda t, p: t.permute(p).contiguous())
        c("prims.reshape", x, [6, 4], ref=lambda t, s: t.reshape(s).clone())
        c("prims.broadcast_in_dim", gen.tensor((3, 1), d), [2, 3, 4], [1, 2],
          ref=broadcast_in_dim_ref)
        c("prims.broadcast_in_dim", gen.tensor((), d), [2, 2], [], ref=broadcast_in_dim_ref)
        c("prims.slice", x, [0, 1, 0], [2, 3, 4], [1, 1, 3],
          ref=lambda t, s, l, st: t[tuple(slice(a, b, c) for a, b, c in zip(s, l, st))].clone())
        c("prims.slice", x, [1, 0, 2], [1, 3, 4], [], ref=lambda t, s, l, st:
          t[tuple(slice(a, b) for a, b in zip(s, l))].clone())
        for cfg in ([0, 0, 0, 1, 2, 1, 0, 0, 2], [-1, 1, 0, 0, 0, 0, 2, -3, 1],
                    [0, -2, 0, 0, 0, 3, 0, 0, 0]):
            c("prims.pad", x, 1.5, cfg, ref=prims_pad_ref)
    check_cases(cases)


def broadcast_in_dim_ref(a, shape, bdims):
    view = [1] * len(shape)
    for i, d in enumerate(bdims):
        view[d] = a.shape[i]
    return a.reshape(view).expand(shape).clone()


def prims_pad_ref(a, value, cfg):
    """prims.pad by hand: per dim (lo, hi, interior): spread the elements
    `interior` apart, then pad or (negative) crop the ends."""
    out = a
    for d in range(a.dim()):
        lo, hi, interior = cfg[3 * d:3 * d + 3]
        n = out.shape[d]
        size = list(out.shape)
        size[d] = n + max(n - 1, 0) * interior
        spread = torch.full(size, value, dtype=a.dtype)
        idx = [slice(None)] * a.dim()
        idx[d] = slice(0, None, interior + 1)
        spread[tuple(idx)] = out
        pad = [0, 0] * (a.dim() - d - 1) + [lo, hi]
        out = F.pad(spread, pad, value=value)
    return out


def test_cat_stack_split():
    gen, cases = gen_for("cat"), []
    for d in ALL:
        a, b, c0 = gen.tensor((2, 3), d), gen.tensor((1, 3), d), gen.tensor((0, 3), d)
        empty = gen.tensor((0,), d)
        for op in ("cat", "prims.cat"):
            ref = torch.cat
            cases.append(make_case(op, ([a, b, c0], 0), ref=ref))
            cases.append(make_case(op, ([a, a], 1 if op == "prims.cat" else -1), ref=ref))
        cases.append(make_case("cat", ([a, empty, b],), ref=torch.cat))
        cases.append(make_case("cat", ([a, gen.tensor((1, 3), torch.float16)],), ref=torch.cat))
        cases.append(make_case("stack", ([a, a, a], 1), ref=torch.stack))
        cases.append(make_case("stack", ([a, a], -1), ref=torch.stack))
        x = gen.tensor((5, 4), d)
        cases.append(make_case("split", (x, 2)))
        cases.append(make_case("split", (x, 3, 1)))
        cases.append(make_case("split_with_sizes", (x, [1, 0, 4])))
        cases.append(make_case("chunk", (x, 3, 1)))
        cases.append(make_case("chunk", (x, 2)))
        cases.append(make_case("unbind", (x, 1)))
        cases.append(make_case("unbind", (gen.tensor((2, 0), d),)))
    check_cases(cases)


# ---- indexing ---------------------------------------------------------------------------


def test_indexing():
    gen, cases = gen_for("index"), []
    for d in ALL:
        x = gen.tensor((4, 5, 3), d)
        i = gen.tensor((2, 3), torch.int64, low=-4, high=4)
        j = gen.tensor((3,), torch.int32, low=0, high=5)
        # boolean masks select a data-dependent count, which meta rejects:
        # test_ref.c covers the kernel's mask support
        for idx in ([i], [None, j], [i, j], [i, None, gen.tensor((1,), torch.int64, low=0,
                                                                     high=3)],
                    [None, None, j.long() % 3], [gen.tensor((0,), torch.int64, low=0, high=1)],
                    [None, gen.tensor((2, 1), torch.int64, low=-5, high=5), j]):
            cases.append(make_case("index", (x, idx)))
        sel = gen.tensor((4,), torch.int64, low=0, high=5)
        cases.append(make_case("index_select", (x, 1, sel)))
        cases.append(make_case("index_select", (x, -1, sel % 3)))
        cases.append(make_case("index_select", (x, 0, gen.tensor((), torch.int32, low=0, high=4))))
        cases.append(make_case("prims.index_select", (x, 0, sel % 4), ref=torch.index_select))
        # advanced indexing's check: negative indices wrap, as eager's do
        cases.append(make_case("prims.check_index",
                               (gen.tensor((2, 3), torch.int64, low=-4, high=4), 4, 0),
                               ref=lambda i, size, dim: torch.where(i < 0, i + size, i)))
        s0 = gen.tensor((), d)
        cases.append(make_case("index_select", (s0, 0, torch.tensor([0]))))
        cases.append(make_case("gather", (s0, 0, torch.tensor([0, 0])), ref=torch.gather))
        g = gen.tensor((4, 2, 3), torch.int64, low=0, high=5)
        for op in ("gather", "prims.gather"):
            cases.append(make_case(op, (x, 1, g), ref=torch.gather))
            cases.append(make_case(op, (x, 0, g % 4), ref=torch.gather))
        if d != torch.bool:
            src = gen.tensor((4, 2, 3), d)
            cases.append(make_case("prims.scatter_add", (x, 1, g, src),
                                   ref=lambda a, dim, i, s: a.scatter_add(dim, i, s)))
            # scatter: distinct places per line, where torch's order is its own
            perm = torch.stack([torch.randperm(5, generator=torch.Generator().manual_seed(k))[:2]
                                for k in range(12)]).reshape(4, 3, 2)
            perm = perm.transpose(1, 2).contiguous()
            for op in ("scatter", "prims.scatter", "scatter_add"):
                ref = torch.scatter if op.endswith("scatter") else torch.scatter_add
                cases.append(make_case(op, (x, 1, perm, src[:, :2]), ref=ref))
            cases.append(make_case("scatter", (x, 1, perm.int(), src[:, :2]), ref=torch.scatter))
        w = gen.tensor((6, 3), d)
        cases.append(make_case("embedding", (w, gen.tensor((2, 4), torch.int64, low=0, high=6))))
        cases.append(make_case("embedding", (w, gen.tensor((), torch.int64, low=0, high=6))))
    check_cases(cases)


def test_index_out_of_range_fails_like_torch(tmp_path):
    x = torch.arange(6.0).reshape(2, 3)
    i = torch.tensor([0, 3])
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 2"):
        x[i]
    case = Case("index", (x, [i]), {}, torch.zeros(2, 3))
    outs, err = run_graph([case], str(tmp_path))
    assert outs is None and "index 3 is out of bounds for dimension 0 with size 2" in err


# ---- creation ----------------------------------------------------------------------------


def test_creation():
    cases = []
    for d in ALL:
        for size in ([2, 3], [0], []):
            cases.append(make_case("full", (size, 2.5 if d.is_floating_point else 3),
                                   {"dtype": d}, ref=lambda s, v, dtype: torch.full(s, v,
                                                                                   dtype=dtype)))
            cases.append(make_case("zeros", (size,), {"dtype": d},
                                   ref=lambda s, dtype: torch.zeros(s, dtype=dtype)))
            cases.append(make_case("ones", (size,), {"dtype": d},
                                   ref=lambda s, dtype: torch.ones(s, dtype=dtype)))
            cases.append(make_case("empty", (size,), {"dtype": d},
                                   ref=lambda s, dtype: torch.zeros(s, dtype=dtype)))
            cases.append(make_case("prims.full", (size, True), {"dtype": d, "device": CPU},
                                   ref=lambda s, v, dtype, device: torch.full(s, v, dtype=dtype)))
        for start, end, step in [(0, 5, 1), (1, 2, 0.25), (-3, 4, 2), (5, 0, -1.5), (0.5, 3, 1),
                                 (2, 2, 1)]:
            if not d.is_floating_point and (step != int(step) or d == torch.bool):
                continue  # torch divides by the truncated step (SIGFPE)
            cases.append(make_case("arange", (start, end, step), {"dtype": d},
                                   ref=lambda a, b, c, dtype: torch.arange(a, b, c, dtype=dtype)))
        for length, start, step in [(4, 0, 1), (3, 5, -2), (0, 1, 1)] if d != torch.bool else []:
            cases.append(make_case("prims.iota", (length,),
                                   {"start": start, "step": step, "dtype": d, "device": CPU},
                                   ref=lambda n, start, step, dtype, device:
                                   (start + step * torch.arange(n)).to(dtype)))
    cases.append(make_case("full", ([2], 7)))
    cases.append(make_case("arange", (0, 3)))
    cases.append(make_case("arange", (0, 3.0)))
    check_cases(cases)


def test_every_op_is_covered():
    """Every op of ops.def appears in a test above (by its printed name)."""
    import re
    src_dir = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..",
                                                                "..")
    ops = ptcio.op_names(src_dir)
    with open(__file__) as f:
        literals = set(re.findall(r'"([\w.]+)"', f.read()))
    literals |= {"prims." + n for n in list(PRIM_UNARY) + list(PRIM_BINARY) + list(PRIM_REDUCE)}
    literals |= set(UNARY) | set(BINARY)
    literals |= {"prims." + n for n in ("rand", "randn")} | {"conv1d", "conv2d", "conv3d"}
    missing = [op for op in ops if op not in literals]
    assert len(ops) > 150 and not missing, missing
