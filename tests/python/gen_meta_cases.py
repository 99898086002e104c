#!/usr/bin/env python3
"""Generate the meta-inference corpus (tests/data/meta/) from PyTorch.

Every case is one op applied to graph inputs of given dtypes and shapes,
written as a .ptir graph. The case is run in eager torch: the node's printed
output types are exactly what torch produced (dtype, shape, requires_grad),
and when torch raises, the case is an expected error (its own file, whose
header says `# expect: MetaError <op>`). ptc's meta functions must agree:
tests/unit/test_meta_corpus.c runs ptc_ops_verify on each file and
tests/python/test_meta_torch.py regenerates the corpus from the installed
torch and checks it through `ptc-run --emit=ptir`.

Prims have no eager torch counterpart with ptc's strict rules, so their
results are computed by hand below (the torch op on already promoted and
broadcast operands, after checking what the prim requires).

    gen_meta_cases.py [OUT_DIR]     (default: tests/data/meta next to this file)

Works with torch 1.13 and 2.x: cases whose torch function is missing are
skipped, and cases whose behaviour changed in torch 2 say so (since=).
"""
import math
import os
import re
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptcio import PTIR_NAME, op_names  # noqa: E402

aten = torch.ops.aten
TORCH_VERSION = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
DT = {v: k for k, v in PTIR_NAME.items()}  # "f32" -> torch.float32
MIN_CASES = 5


class PrimError(Exception):
    """A prim's strict requirement does not hold (the meta must reject it)."""


class T:
    """A graph input: dtype name, shape, requires_grad, fill value, strides."""

    def __init__(self, dtype, shape, grad=False, fill=None, strides=None):
        self.dtype, self.shape, self.grad = dtype, list(shape), grad
        self.fill, self.strides = fill, strides

    def ptir(self):
        s = "%s[%s]" % (self.dtype, ",".join(str(d) for d in self.shape))
        if self.strides is not None:
            s += "{%s}" % ",".join(str(d) for d in self.strides)
        return s + " cpu" + (" grad" if self.grad else "")

    def make(self):
        dt = DT[self.dtype]
        fill = self.fill if self.fill is not None else (True if dt == torch.bool else 1)
        if self.strides is not None:
            t = torch.empty_strided(self.shape, self.strides, dtype=dt).fill_(fill)
        else:
            t = torch.full(self.shape, fill, dtype=dt)
        return t.requires_grad_(self.grad)


def I(dtype, shape, **kw):  # noqa: E743
    """An index tensor: filled with zeros, always a valid index."""
    return T(dtype, shape, fill=0, **kw)


class Case:
    def __init__(self, op, args, expr, inputs, since=None, rejects=None):
        self.op, self.args, self.expr, self.inputs = op, args, expr, inputs
        self.since, self.rejects = since, rejects


CASES = []


def C(op, args, expr, since=None, rejects=None, **inputs):
    """A case: ptc op, its .ptir args, the torch expression, the inputs.
    since: the torch version whose behaviour the case pins; rejects: why ptc
    deliberately rejects a call torch accepts (an expected error)."""
    CASES.append(Case(op, args, expr, inputs, since, rejects))


# ---- prims computed by hand ---------------------------------------------------

def _same(*ts):
    for t in ts[1:]:
        if t.dtype != ts[0].dtype:
            raise PrimError("operands must have one dtype")
        if t.shape != ts[0].shape:
            raise PrimError("operands must have one shape")


PRIM_FLOAT_ONLY = {"exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
                   "erf", "reciprocal", "atan2", "copysign"}
PRIM_NO_BOOL = {"abs", "neg", "floor", "ceil", "round", "trunc", "sub", "div", "floor_divide",
                "remainder", "fmod", "pow"}


def prim_unary(name, a):
    if name in PRIM_FLOAT_ONLY and not a.dtype.is_floating_point:
        raise PrimError("float only")
    if a.dtype == torch.bool and name in PRIM_NO_BOOL:
        raise PrimError("no bool")
    if name == "bitwise_not" and a.dtype.is_floating_point:
        raise PrimError("ints only")
    if name in ("logical_not", "isnan"):
        return getattr(torch, name)(a)
    return getattr(torch, name)(a).to(a.dtype)


def prim_binary(name, a, b):
    _same(a, b)
    bitwise = name.startswith("bitwise_")
    if bitwise and a.dtype.is_floating_point:
        raise PrimError("ints only")
    if name in PRIM_NO_BOOL and a.dtype == torch.bool:
        raise PrimError("no bool")
    if name in PRIM_FLOAT_ONLY and not a.dtype.is_floating_point:
        raise PrimError("float only")
    if name in ("eq", "ne", "lt", "le", "gt", "ge"):
        return getattr(torch, name)(a, b)
    return _out(a.shape, a.dtype, a, b)


def prim_where(p, a, b):
    if p.dtype != torch.bool:
        raise PrimError("bool predicate")
    _same(a, b)
    if p.shape != a.shape:
        raise PrimError("predicate shape")
    return torch.where(p, a, b)


def _out(shape, dtype, *inputs):
    """A result of a prim: requires grad iff a floating input does and it is floating."""
    grad = dtype.is_floating_point and any(t.requires_grad and t.dtype.is_floating_point
                                           for t in inputs)
    return torch.empty(shape, dtype=dtype, requires_grad=grad)


def _dims(a, dims):
    if len(set(dims)) != len(dims) or any(d < 0 or d >= a.dim() for d in dims):
        raise PrimError("bad dims")


def prim_reduce(name, a, dims):
    _dims(a, dims)
    if name in ("sum", "prod") and a.dtype == torch.bool:
        raise PrimError("no bool")
    if name in ("amax", "amin") and any(a.shape[d] == 0 for d in dims):
        raise PrimError("empty reduction")
    shape = [s for i, s in enumerate(a.shape) if i not in dims]
    return _out(shape, a.dtype, a)


def prim_argreduce(a, dim):
    _dims(a, [dim])
    if a.dtype == torch.bool or a.shape[dim] == 0:
        raise PrimError("bad argmax")
    return torch.argmax(a.detach().float(), dim)


def prim_var_mean(a, dims):
    _dims(a, dims)
    if not a.dtype.is_floating_point:
        raise PrimError("float only")
    shape = [s for i, s in enumerate(a.shape) if i not in dims]
    return _out(shape, a.dtype, a), _out(shape, a.dtype, a)


def prim_cumsum(a, dim, scan=torch.cumsum):
    if dim < 0 or dim >= max(a.dim(), 1) or a.dtype == torch.bool:
        raise PrimError("bad " + scan.__name__)
    return scan(a, dim, dtype=a.dtype)


def prim_broadcast_in_dim(a, shape, bdims):
    if len(bdims) != a.dim() or any(s < 0 for s in shape):
        raise PrimError("bad broadcast_dimensions")
    if any(y <= x for x, y in zip(bdims, bdims[1:])) or any(d < 0 or d >= len(shape) for d in bdims):
        raise PrimError("broadcast_dimensions not increasing")
    view = [1] * len(shape)
    for i, d in enumerate(bdims):
        if a.shape[i] != shape[d] and a.shape[i] != 1:
            raise PrimError("cannot broadcast")
        view[d] = a.shape[i]
    return a.reshape(view).expand(shape)


def prim_reshape(a, shape):
    if any(s < 0 for s in shape) or math.prod(shape) != a.numel():
        raise PrimError("bad reshape")
    return a.reshape(shape)


def prim_permute(a, dims):
    if sorted(dims) != list(range(a.dim())):
        raise PrimError("not a permutation")
    return a.permute(dims)


def prim_slice(a, start, limit, strides):
    strides = strides or [1] * a.dim()
    if not (len(start) == len(limit) == len(strides) == a.dim()):
        raise PrimError("lengths")
    for s, l, st, n in zip(start, limit, strides, a.shape):
        if not (0 <= s <= l <= n) or st <= 0:
            raise PrimError("bounds")
    return a[tuple(slice(s, l, st) for s, l, st in zip(start, limit, strides))]


def prim_pad(a, value, config):
    """torch._prims.pad: (lo, hi, interior) per dim."""
    if len(config) != 3 * a.dim():
        raise PrimError("config length")
    shape = []
    for i, n in enumerate(a.shape):
        lo, hi, interior = config[3 * i:3 * i + 3]
        if interior < 0:
            raise PrimError("negative interior")
        shape.append(n + max(n - 1, 0) * interior + lo + hi)
    if any(s < 0 for s in shape):
        raise PrimError("negative size")
    return _out(shape, a.dtype, a)


def prim_cat(ts, dim):
    t0 = ts[0]
    if dim < 0 or dim >= t0.dim():
        raise PrimError("dim")
    for t in ts[1:]:
        if t.dtype != t0.dtype or t.dim() != t0.dim() or any(
                i != dim and x != y for i, (x, y) in enumerate(zip(t.shape, t0.shape))):
            raise PrimError("mismatch")
    return torch.cat(ts, dim)


def prim_gather(a, dim, index):
    if index.dtype != torch.int64:
        raise PrimError("i64 index")
    return torch.gather(a, dim, index)


def prim_check_index(index, size, nth):
    if index.dtype != torch.int64:
        raise PrimError("i64 index")
    return torch.where(index < 0, index + size, index)


def prim_scatter_add(a, dim, index, src):
    if index.dtype != torch.int64 or src.dtype != a.dtype:
        raise PrimError("dtypes")
    if index.dim() != a.dim() or src.dim() != a.dim():
        raise PrimError("dims")
    for d in range(a.dim()):
        if index.shape[d] > src.shape[d] or (d != dim and index.shape[d] > a.shape[d]):
            raise PrimError("index too large")
    return torch.scatter_add(a, dim, index, src)


def prim_scatter(a, dim, index, src):
    prim_scatter_add(a, dim, index, src)  # the same checks
    return torch.scatter(a, dim, index, src)


def prim_iota(length, start, step, dtype):
    if length < 0 or dtype == torch.bool:
        raise PrimError("bad iota")
    return torch.arange(start, start + length * step, step, dtype=dtype)[:length]


def prim_full(shape, value, dtype, random=False):
    if any(s < 0 for s in shape) or (random and not dtype.is_floating_point):
        raise PrimError("bad full")
    return torch.full(shape, value, dtype=dtype)


def bn(x, w, b, rm, rv, training, momentum=0.1, eps=1e-5):
    """ptc's batch_norm: also returns the updated running stats in training."""
    out = F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
    if training and rm is not None:
        return out, rm.detach().clone(), rv.detach().clone()
    return out


# ---- torch-level cases --------------------------------------------------------

UNARY = {  # ptc op -> torch callable text
    "abs": "torch.abs", "neg": "torch.neg", "relu": "torch.relu", "floor": "torch.floor",
    "ceil": "torch.ceil", "trunc": "torch.trunc", "sign": "torch.sign", "round": "torch.round",
    "hardtanh": "F.hardtanh", "exp": "torch.exp", "log": "torch.log", "log1p": "torch.log1p",
    "expm1": "torch.expm1", "sqrt": "torch.sqrt", "rsqrt": "torch.rsqrt", "sin": "torch.sin",
    "cos": "torch.cos", "tan": "torch.tan", "asin": "torch.asin", "acos": "torch.acos",
    "sinh": "torch.sinh", "cosh": "torch.cosh", "tanh": "torch.tanh", "sigmoid": "torch.sigmoid", "erf": "torch.erf",
    "reciprocal": "torch.reciprocal", "logit": "torch.logit", "frac": "torch.frac",
    "gelu": "F.gelu", "silu": "F.silu",
    "hardswish": "F.hardswish", "hardsigmoid": "F.hardsigmoid", "leaky_relu": "F.leaky_relu",
    "elu": "F.elu", "softplus": "F.softplus", "logical_not": "torch.logical_not",
    "isnan": "torch.isnan", "bitwise_not": "torch.bitwise_not",
}
UNARY_INPUTS = [T("f32", [2, 3], grad=True), T("f16", [4]), T("bf16", []), T("f64", [1, 3]),
                T("i64", [2, 0]), T("i32", [3]), T("u8", [3, 1]), T("i8", [2]), T("bool", [2])]


def unary_cases():
    for op, fn in UNARY.items():
        for x in UNARY_INPUTS:
            C(op, "%x", "%s(x)" % fn, x=x)
    C("round", "%x, decimals=2", "torch.round(x, decimals=2)", x=T("f32", [2]))
    C("round", "%x, decimals=1", "torch.round(x, decimals=1)", x=T("i64", [2]))
    C("hardtanh", "%x, 0, 6", "F.hardtanh(x, 0, 6)", x=T("f32", [2, 3], grad=True))
    C("hardtanh", "%x, -2.5, 2.5", "F.hardtanh(x, -2.5, 2.5)", x=T("i32", [2]))
    C("leaky_relu", "%x, 0.2", "F.leaky_relu(x, 0.2)", x=T("f16", [2]))
    C("elu", "%x, 0.5, 2, 1.5", "aten.elu(x, 0.5, 2, 1.5)", x=T("f32", [2]))
    C("softplus", "%x, 2, 10", "F.softplus(x, 2, 10)", x=T("f64", [2]))
    C("gelu", '%x, approximate="tanh"', 'F.gelu(x, approximate="tanh")', x=T("bf16", [2]),
      since=(1, 12))


# Operand pairs for binary ops: (x, y-or-scalar-text, python value of the scalar).
BINARY_PAIRS = [
    (T("f32", [2, 3], grad=True), T("f32", [3])),
    (T("f32", [2, 1, 4]), T("f32", [3, 1])),
    (T("f32", [2, 3]), T("f32", [4])),          # cannot broadcast
    (T("f32", [0, 1]), T("f32", [1, 5])),       # zero-size
    (T("f16", [2]), T("bf16", [2])),
    (T("u8", [2]), T("i8", [2])),
    (T("f16", [2]), T("f64", [])),              # 0-dim loses within a category
    (T("i32", [2]), T("f64", [])),              # ... but wins across categories
    (T("u8", [2]), T("i64", [])),
    (T("bool", [2]), T("bool", [2])),
    (T("bool", [2, 1]), T("i64", [3])),
    (T("i64", [2, 3]), T("i64", [2, 3])),
    (T("f64", [1]), T("i32", [2, 2], grad=False)),
    (T("f32", []), T("f16", [])),
]
BINARY_SCALARS = [(T("f16", [2]), "2.5"), (T("i64", [2]), "2.5"), (T("u8", [2]), "300"),
                  (T("bool", [2]), "2"), (T("i32", []), "2.0"),
                  (T("i64", [2]), "-2"), (T("f32", [2], grad=True), "3")]
BINARY = {  # ptc op -> (torch text, other may be a scalar)
    "add": ("torch.add", True), "sub": ("torch.sub", True), "rsub": ("torch.rsub", True),
    "mul": ("torch.mul", True), "div": ("torch.div", True), "pow": ("torch.pow", True),
    "remainder": ("torch.remainder", True), "fmod": ("torch.fmod", True),
    "maximum": ("torch.maximum", False),
    "minimum": ("torch.minimum", False), "atan2": ("torch.atan2", False),
    "logaddexp": ("torch.logaddexp", False), "copysign": ("torch.copysign", True),
    "eq": ("torch.eq", True), "ne": ("torch.ne", True), "lt": ("torch.lt", True),
    "le": ("torch.le", True), "gt": ("torch.gt", True), "ge": ("torch.ge", True),
    "logical_and": ("torch.logical_and", False), "logical_or": ("torch.logical_or", False),
    "logical_xor": ("torch.logical_xor", False), "bitwise_and": ("torch.bitwise_and", True),
    "bitwise_or": ("torch.bitwise_or", True), "bitwise_xor": ("torch.bitwise_xor", True),
}


def py_scalar(text):
    return {"true": "True", "false": "False"}.get(text, text)


def binary_cases():
    for op, (fn, scalar_ok) in BINARY.items():
        for x, y in BINARY_PAIRS:
            C(op, "%x, %y", "%s(x, y)" % fn, x=x, y=y)
        if scalar_ok:
            for x, s in BINARY_SCALARS:
                C(op, "%%x, %s" % s, "%s(x, %s)" % (fn, py_scalar(s)), x=x)
    for op in ("add", "sub", "rsub"):
        C(op, "%x, %y, alpha=2", "torch.%s(x, y, alpha=2)" % op, x=T("i64", [2]), y=T("i64", [2]))
        C(op, "%x, %y, alpha=0.5", "torch.%s(x, y, alpha=0.5)" % op, x=T("i64", [2]), y=T("i64", [2]))
        C(op, "%x, %y, alpha=0.5", "torch.%s(x, y, alpha=0.5)" % op, x=T("f16", [2]), y=T("f32", [2]))
        C(op, "%x, %y, alpha=true", "torch.%s(x, y, alpha=True)" % op, x=T("f32", [2]), y=T("f32", [2]))
    C("add", "%x, %y, alpha=2", "torch.add(x, y, alpha=2)", x=T("bool", [2]), y=T("bool", [2]))
    C("add", "%x, %y, alpha=true", "torch.add(x, y, alpha=True)", x=T("bool", [2]), y=T("bool", [2]))
    for mode in ("floor", "trunc"):
        for x, y in [(T("i64", [2]), T("i64", [2])), (T("u8", [2]), T("i8", [2])),
                     (T("bool", [2]), T("bool", [2])), (T("f16", [2, 1]), T("f16", [3]))]:
            C("div", '%%x, %%y, rounding_mode="%s"' % mode,
              'torch.div(x, y, rounding_mode="%s")' % mode, x=x, y=y)
    C("div", '%x, %y, rounding_mode="round"', 'torch.div(x, y, rounding_mode="round")',
      x=T("f32", [2]), y=T("f32", [2]))
    C("pow", "2, %x", "torch.pow(2, x)", x=T("i64", [2]))
    for op, (fn, scalar_ok) in BINARY.items():
        if scalar_ok:  # bool ** True is bool in torch 2 only
            C(op, "%x, true", "%s(x, True)" % fn, since=(2, 0), x=T("bool", [2]))
    C("pow", "2.5, %x", "torch.pow(2.5, x)", x=T("i64", [2]))
    C("pow", "true, %x", "torch.pow(True, x)", x=T("f16", [2]))
    C("pow", "%x, %y", "torch.pow(x, y)", x=T("i64", [2]), y=T("i64", [], fill=-2))


def ternary_cases():
    w = "torch.where"
    for c, x, y in [(T("bool", [2, 1]), T("f32", [3]), T("f32", [1])),
                    (T("bool", [2]), T("u8", [2]), T("i8", [2])),
                    (T("bool", []), T("f64", []), T("i32", [])),
                    (T("bool", [3]), T("f32", [2]), T("f32", [2])),
                    (T("f32", [2]), T("f32", [2]), T("f32", [2])),
                    (T("i64", [2]), T("f32", [2]), T("f32", [2])),
                    (T("bool", [2]), T("i64", [2]), T("f16", [2], grad=True)),
                    (T("bool", [0, 2]), T("f32", [1, 2], grad=True), T("f32", [2]))]:
        C("where", "%c, %x, %y", w + "(c, x, y)", c=c, x=x, y=y)
    C("where", "%c, %x, %x", w + "(c, x, x)", since=(2, 0), c=T("u8", [2]), x=T("f32", [2]))
    for a, b in [("1", "0"), ("1.0", "0"), ("true", "false"), ("%x", "5"), ("%x", "5.5")]:
        inputs = {"c": T("bool", [2])}
        if "%x" in a:
            inputs["x"] = T("u8", [2])
        C("where", "%%c, %s, %s" % (a, b), "%s(c, %s, %s)" % (w, py_scalar(a.replace("%", "")),
                                                           py_scalar(b)), since=(2, 0), **inputs)
    for args, expr, x in [("%x, 0.5", "torch.clamp(x, 0.5)", T("i64", [2])),
                          ("%x, 0, 2", "torch.clamp(x, 0, 2)", T("i64", [2])),
                          ("%x, max=2", "torch.clamp(x, max=2)", T("i64", [2])),
                          ("%x, 0, 1", "torch.clamp(x, 0, 1)", T("bool", [2])),
                          ("%x, false, true", "torch.clamp(x, False, True)", T("bool", [2])),
                          ("%x", "torch.clamp(x)", T("i64", [2])),
                          ("%x, -1.5, 1.5", "torch.clamp(x, -1.5, 1.5)", T("f16", [2, 3], grad=True))]:
        C("clamp", args, expr, x=x)
    C("clamp", "%x, %lo", "torch.clamp(x, lo)", since=(2, 0), x=T("f16", [2]), lo=T("f32", [1]))
    C("clamp", "%x, min=%lo", "torch.clamp(x, min=lo)", since=(2, 0), x=T("i64", [2]),
      lo=T("f32", [3, 1]))
    C("clamp", "%x, %lo, %hi", "torch.clamp(x, lo, hi)", since=(2, 0), x=T("f32", [2]),
      lo=T("f32", [3]), hi=T("f32", [2]))
    mf = "x.masked_fill(m, %s)"
    for x, m, v in [(T("f32", [3]), T("bool", [2, 3]), "1"), (T("i64", [3]), T("bool", [3]), "0.5"),
                    (T("f32", [1, 3]), T("bool", [2, 1]), "1"),
                    (T("f32", [3]), T("bool", [2]), "1"), (T("bool", [3]), T("bool", [3]), "2.5"),
                    (T("f32", [3], grad=True), T("bool", [3]), "true")]:
        C("masked_fill", "%%x, %%m, %s" % v, mf % py_scalar(v), x=x, m=m)
    C("masked_fill", "%x, %m, %v", mf % "v", x=T("f32", [3]), m=T("bool", [3]), v=T("i64", []))
    C("masked_fill", "%x, %m, 1", mf % "1", since=(2, 0), x=T("f32", [3]), m=T("u8", [3]))
    C("masked_fill", "%x, %m, %v", mf % "v", x=T("f32", [3]), m=T("bool", [3]), v=T("f32", [1]))


def reduction_cases():
    x23, b23, i23, u23 = T("f32", [2, 3], grad=True), T("bool", [2, 3]), T("i64", [2, 3]), T("u8", [2, 3])
    z, s = T("f32", [2, 0]), T("f32", [])
    for op in ("sum", "mean", "amax", "amin", "logsumexp", "any", "all"):
        fn = "torch." + op
        # dim lists for any/all arrived in torch 2.2
        lists = (2, 2) if op in ("any", "all") else None
        for x in (x23, b23, i23, u23, T("f16", [4, 2, 3])):
            if op != "logsumexp":
                C(op, "%x", "%s(x)" % fn, x=x)
            C(op, "%x, [1], true", "%s(x, [1], True)" % fn, since=lists, x=x)
        for args, x in (("[-1]", x23), ("[0, 1]", x23), ("[0, 0]", x23), ("[2]", x23), ("[1]", z),
                        ("[0]", z), ("[0]", s), ("[]", x23)):
            C(op, "%%x, %s" % args, "%s(x, %s)" % (fn, args), since=lists or (2, 0), x=x)
        if op != "logsumexp":
            C(op, "%x", "%s(x)" % fn, x=z)
    C("logsumexp", "%x, [1]", "torch.logsumexp(x, [1])", x=T("bool", [2, 3]))
    for op in ("sum", "mean"):
        fn = "torch." + op
        C(op, "%x, dtype=f32", "%s(x, dtype=torch.float32)" % fn, x=T("f16", [2, 3]))
        C(op, "%x, [0], dtype=f16", "%s(x, [0], dtype=torch.float16)" % fn, x=i23)
        # (an input requiring grad cannot be reduced into an integer dtype:
        # an autograd rule that depends on grad mode, not modelled by meta)
        C(op, "%x, dtype=i64", "%s(x, dtype=torch.int64)" % fn, x=T("f32", [2, 3]))
        C(op, "%x, dtype=bool", "%s(x, dtype=torch.bool)" % fn, x=T("f32", [2, 3]))
    C("prod", "%x", "torch.prod(x)", x=b23)
    C("prod", "%x, 0", "torch.prod(x, 0)", x=T("i32", [2, 3]))
    C("prod", "%x, -1, true", "torch.prod(x, -1, True)", x=x23)
    C("prod", "%x, 1, dtype=i32", "torch.prod(x, 1, dtype=torch.int32)", x=T("f32", [2, 3]))
    C("prod", "%x, 2", "torch.prod(x, 2)", x=x23)
    C("prod", "%x, 1", "torch.prod(x, 1)", x=z)
    C("prod", "%x, 0", "torch.prod(x, 0)", x=T("u8", [3]))
    for op in ("var", "std"):
        fn = "torch." + op
        C(op, "%x", "%s(x)" % fn, x=x23)
        C(op, "%x, [1], keepdim=true", "%s(x, [1], keepdim=True)" % fn, x=T("f16", [2, 3]))
        C(op, "%x, [0], correction=0", "%s(x, [0], correction=0)" % fn, x=x23)
        C(op, "%x, [-1, 0]", "%s(x, [-1, 0])" % fn, x=T("f64", [2, 3, 4]))
        C(op, "%x", "%s(x)" % fn, x=i23)
        C(op, "%x, [3]", "%s(x, [3])" % fn, x=x23)
        C(op, "%x, []", "%s(x, [])" % fn, since=(2, 0), x=x23)
    for op in ("argmax", "argmin"):
        fn = "torch." + op
        C(op, "%x", "%s(x)" % fn, x=x23)
        C(op, "%x, keepdim=true", "%s(x, keepdim=True)" % fn, x=x23)
        C(op, "%x, -1", "%s(x, -1)" % fn, x=T("i32", [2, 3]))
        C(op, "%x, 0, true", "%s(x, 0, True)" % fn, x=T("f16", [2, 3]))
        C(op, "%x, 0", "%s(x, 0)" % fn, x=z)
        C(op, "%x, 1", "%s(x, 1)" % fn, x=z)
        C(op, "%x", "%s(x)" % fn, x=z)
        C(op, "%x, 0", "%s(x, 0)" % fn, x=s)
        C(op, "%x, 2", "%s(x, 2)" % fn, x=x23)
        C(op, "%x, 0", "%s(x, 0)" % fn, x=T("bool", [3]))
    for x in (b23, i23, u23, x23, T("f16", [3])):
        C("cumsum", "%x, 0", "torch.cumsum(x, 0)", x=x)
    C("cumsum", "%x, -1, dtype=i32", "torch.cumsum(x, -1, dtype=torch.int32)", x=T("f32", [2, 3]))
    C("cumsum", "%x, 0, dtype=f64", "torch.cumsum(x, 0, dtype=torch.float64)", x=x23)
    C("cumsum", "%x, 2", "torch.cumsum(x, 2)", x=x23)
    C("cumsum", "%x, 0", "torch.cumsum(x, 0)", x=s)
    for x in (b23, i23, x23):
        C("cumprod", "%x, 1", "torch.cumprod(x, 1)", x=x)
    C("cumprod", "%x, 0", "torch.cumprod(x, 0)", x=T("f16", [3]))
    C("cumprod", "%x, 0, dtype=f64", "torch.cumprod(x, 0, dtype=torch.float64)", x=x23)
    C("cumprod", "%x, 2", "torch.cumprod(x, 2)", x=x23)
    for x in (x23, i23, b23, s, T("f16", [3])):
        C("sort", "%x", "tuple(torch.sort(x))", x=x)
    C("sort", "%x, dim=0, descending=true", "tuple(torch.sort(x, 0, True))", x=x23)
    C("sort", "%x, dim=2", "tuple(torch.sort(x, 2))", x=x23)
    for x in (x23, i23, T("f16", [3])):
        C("topk", "%x, 2", "tuple(torch.topk(x, 2))", x=x)
    C("topk", "%x, 1", "tuple(torch.topk(x, 1))", x=s)
    C("topk", "%x, 2, dim=0, largest=false", "tuple(torch.topk(x, 2, 0, False))", x=x23)
    C("topk", "%x, 4", "tuple(torch.topk(x, 4))", x=x23)
    C("topk", "%x, 1, dim=2", "tuple(torch.topk(x, 1, 2))", x=x23)
    for op in ("cummax", "cummin"):
        for x in (x23, i23, b23, T("f16", [3])):
            C(op, "%x, 0", "tuple(torch.%s(x, 0))" % op, x=x)
        C(op, "%x, -1", "tuple(torch.%s(x, -1))" % op, x=x23)
        C(op, "%x, 0", "tuple(torch.%s(x, 0))" % op, x=s)
        C(op, "%x, 2", "tuple(torch.%s(x, 2))" % op, x=x23)


def norm_cases():
    for op, fn in (("softmax", "torch.softmax"), ("log_softmax", "torch.log_softmax")):
        C(op, "%x, -1", "%s(x, -1)" % fn, x=T("f32", [2, 3], grad=True))
        C(op, "%x, 0, f32", "%s(x, 0, dtype=torch.float32)" % fn, x=T("i64", [2, 3]))
        C(op, "%x, 1, f32", "%s(x, 1, dtype=torch.float32)" % fn, x=T("f16", [2, 3]))
        C(op, "%x, 0", "%s(x, 0)" % fn, x=T("i64", [2, 3]))
        C(op, "%x, 0, i64", "%s(x, 0, dtype=torch.int64)" % fn, x=T("f32", [2, 3]))
        C(op, "%x, 2", "%s(x, 2)" % fn, x=T("f32", [2, 3]))
        C(op, "%x, 0", "%s(x, 0)" % fn, x=T("f32", []))
        C(op, "%x, 1", "%s(x, 1)" % fn, x=T("bf16", [2, 0]))
    ln = "F.layer_norm"
    C("layer_norm", "%x, [4], %w, %b", ln + "(x, [4], w, b)", x=T("f32", [3, 4], grad=True),
      w=T("f32", [4], grad=True), b=T("f32", [4]))
    C("layer_norm", "%x, [3], %w", ln + "(x, [3], w)", x=T("f16", [2, 3]), w=T("f32", [3]))
    C("layer_norm", "%x, [3, 4]", ln + "(x, [3, 4])", x=T("f32", [2, 3, 4]))
    C("layer_norm", "%x, [2]", ln + "(x, [2])", x=T("f32", [2, 3]))
    C("layer_norm", "%x, [3], %w", ln + "(x, [3], w)", x=T("f32", [2, 3]), w=T("f32", [4]))
    C("layer_norm", "%x, [3], %w", ln + "(x, [3], w)", x=T("f32", [2, 3]), w=T("f64", [3]))
    C("layer_norm", "%x, [3]", ln + "(x, [3])", x=T("i64", [2, 3]))
    C("layer_norm", "%x, [3], eps=0.001", ln + "(x, [3], eps=0.001)", x=T("bf16", [0, 3]))
    ev = "%x, %w, %b, %rm, %rv, false, 0.1, 1e-05"
    tr = "%x, %w, %b, %rm, %rv, true, 0.1, 1e-05"
    C("batch_norm", ev, "bn(x, w, b, rm, rv, False)", x=T("f32", [2, 3, 4]), w=T("f32", [3]),
      b=T("f32", [3]), rm=T("f32", [3]), rv=T("f32", [3]))
    C("batch_norm", tr, "bn(x, w, b, rm, rv, True)", x=T("f32", [2, 3], grad=True),
      w=T("f32", [3], grad=True), b=T("f32", [3], grad=True), rm=T("f32", [3]), rv=T("f32", [3]))
    C("batch_norm", "%x, none, none, none, none, true, 0.1, 1e-05",
      "bn(x, None, None, None, None, True)", x=T("f32", [2, 3, 2, 2]))
    C("batch_norm", "%x, none, none, %rm, %rv, true, 0.1, 1e-05",
      "bn(x, None, None, rm, rv, True)", x=T("f16", [2, 3]), rm=T("f32", [3]), rv=T("f32", [3]))
    C("batch_norm", "%x, none, none, none, none, true, 0.1, 1e-05",
      "bn(x, None, None, None, None, True)", x=T("f32", [1, 3]))
    C("batch_norm", "%x, none, none, none, none, false, 0.1, 1e-05",
      "bn(x, None, None, None, None, False)", x=T("f32", [2, 3]))
    C("batch_norm", "%x, none, none, %rm, %rv, false, 0.1, 1e-05",
      "bn(x, None, None, rm, rv, False)", x=T("f32", [2, 3]), rm=T("f32", [4]), rv=T("f32", [4]))
    C("batch_norm", ev, "bn(x, w, b, rm, rv, False)", x=T("f32", [2, 3, 4]), w=T("f32", [4]),
      b=T("f32", [3]), rm=T("f32", [3]), rv=T("f32", [3]))
    C("batch_norm", "%x, none, none, %rm, %rv, false, 0.1, 1e-05",
      "bn(x, None, None, rm, rv, False)", x=T("i64", [2, 3]), rm=T("f32", [3]), rv=T("f32", [3]))
    gn = "F.group_norm"
    C("group_norm", "%x, 3, %w", gn + "(x, 3, w)", x=T("f32", [2, 6, 4], grad=True), w=T("f32", [6]))
    C("group_norm", "%x, 6", gn + "(x, 6)", x=T("f32", [2, 6]))
    C("group_norm", "%x, 2, %w, %b", gn + "(x, 2, w, b)", x=T("f64", [1, 4, 2, 2]), w=T("f64", [4]),
      b=T("f64", [4]))
    C("group_norm", "%x, 4", gn + "(x, 4)", x=T("f32", [2, 6, 4]))
    C("group_norm", "%x, 3", gn + "(x, 3)", x=T("f32", [6]))
    C("group_norm", "%x, 3, %w", gn + "(x, 3, w)", x=T("f32", [2, 6]), w=T("f32", [3]))
    for x, p, train in [(T("f32", [2, 3], grad=True), "0.5", "true"), (T("i64", [2]), "0.5", "false"),
                        (T("i64", [2]), "0.5", "true"), (T("f32", [2]), "1.5", "false"),
                        (T("bool", [2]), "0.5", "true"), (T("f16", [0, 3]), "0.0", "true"),
                        (T("f32", [2]), "1.0", "true")]:
        C("dropout", "%%x, %s, %s" % (p, train), "F.dropout(x, %s, %s)" % (p, py_scalar(train)), x=x)


def matmul_cases():
    for a, b in [([2, 3], [3, 4]), ([2, 3], [4, 4]), ([3], [3, 4]), ([0, 3], [3, 5]), ([2, 0], [0, 4])]:
        C("mm", "%a, %b", "torch.mm(a, b)", a=T("f32", a, grad=True), b=T("f32", b))
    C("mm", "%a, %b", "torch.mm(a, b)", a=T("f32", [2, 3]), b=T("f64", [3, 4]))
    C("mm", "%a, %b", "torch.mm(a, b)", a=T("i64", [2, 3]), b=T("i64", [3, 4]))
    C("mm", "%a, %b", "torch.mm(a, b)", a=T("bool", [2, 3]), b=T("bool", [3, 4]))
    for a, b in [([5, 2, 3], [5, 3, 4]), ([2, 2, 3], [1, 3, 4]), ([2, 3], [2, 3, 4]), ([0, 2, 3], [0, 3, 1]),
                 ([2, 2, 3], [2, 4, 4])]:
        C("bmm", "%a, %b", "torch.bmm(a, b)", a=T("f32", a), b=T("f32", b, grad=True))
    for a, b in [([3], [3]), ([3], [4]), ([3], [3, 4]), ([2, 3], [3]), ([3], [2, 3, 4]), ([2, 3, 4], [4]),
                 ([5, 1, 2, 3], [4, 3, 6]), ([2, 3], [7, 3, 6]), ([], [3]), ([2, 2, 3], [3, 3, 4]),
                 ([1, 2, 3], [3, 3, 4]), ([0, 2, 3], [3, 0]), ([2, 3], [3, 4])]:
        C("matmul", "%a, %b", "torch.matmul(a, b)", a=T("f32", a, grad=True), b=T("f32", b))
    C("matmul", "%a, %b", "torch.matmul(a, b)", a=T("f32", [3]), b=T("f64", [3]))
    C("matmul", "%a, %b", "torch.matmul(a, b)", a=T("f16", [2, 3]), b=T("f16", [3, 2]))
    for s, a, b, kw in [([4], [2, 3], [3, 4], ""), ([2, 1], [2, 3], [3, 4], ", beta=0.5"),
                        ([3, 2, 4], [2, 3], [3, 4], ""), ([2, 4], [2, 3], [4, 4], ""),
                        ([], [2, 3], [3, 4], ", alpha=2")]:
        C("addmm", "%s, %a, %b" + kw, "torch.addmm(s, a, b%s)" % kw, s=T("f32", s), a=T("f32", a, grad=True),
          b=T("f32", b))
    C("addmm", "%s, %a, %b", "torch.addmm(s, a, b)", s=T("f16", [4]), a=T("f32", [2, 3]), b=T("f32", [3, 4]))
    lin = [([3], [4, 3], None), ([2, 5, 3], [4, 3], [4]), ([2, 3], [3], None), ([2, 3], [3], [2]),
           ([2, 3], [4, 3], [2, 4]), ([2, 3], [4, 3], [3, 2, 4]),
           ([], [4, 3], None), ([3], [2, 4, 3], None), ([2, 5], [4, 3], None), ([0, 3], [4, 3], [4])]
    for x, w, b in lin:
        if b is None:
            C("linear", "%x, %w", "F.linear(x, w)", x=T("f32", x, grad=True), w=T("f32", w))
        else:
            C("linear", "%x, %w, %b", "F.linear(x, w, b)", x=T("f32", x), w=T("f32", w, grad=True),
              b=T("f32", b))
    C("linear", "%x, %w", "F.linear(x, w)", x=T("f32", [2, 3]), w=T("f64", [4, 3]))
    C("linear", "%x, %w, %b", "F.linear(x, w, b)", since=(2, 0), x=T("f32", [2, 5, 3]), w=T("f32", [4, 3]),
      b=T("f32", [2, 1, 4]))
    for s, a, b in [([4], [2, 2, 3], [2, 3, 4]), ([3, 2, 4], [2, 2, 3], [2, 3, 4]),
                    ([2, 2, 4], [2, 2, 3], [2, 3, 4]), ([1], [2, 2, 3], [2, 4, 4]), ([2, 1, 1], [2, 2, 0], [2, 0, 4])]:
        C("baddbmm", "%s, %a, %b", "torch.baddbmm(s, a, b)", s=T("f32", s), a=T("f32", a),
          b=T("f32", b, grad=True))
    sd = "F.scaled_dot_product_attention"
    for q, k, v, extra in [([2, 3, 4], [2, 5, 4], [2, 5, 6], ""), ([3, 4], [5, 4], [5, 6], ""),
                           ([2, 1, 3, 4], [1, 2, 5, 4], [2, 2, 5, 6], ""), ([4], [4], [6], ""),
                           ([2, 3, 4], [2, 5, 4], [2, 6, 6], ""), ([2, 3, 4], [2, 5, 3], [2, 5, 6], ""),
                           ([2, 3, 4], [2, 3, 4], [2, 3, 4], ", is_causal=true"),
                           ([2, 3, 4], [2, 5, 4], [2, 5, 6], ", dropout_p=1.5")]:
        C("scaled_dot_product_attention", "%q, %k, %v" + extra,
          "%s(q, k, v%s)" % (sd, extra.replace("true", "True")), since=(2, 0),
          q=T("f32", q, grad=True), k=T("f32", k), v=T("f32", v))
    for m in (T("bool", [3, 5]), T("f32", [2, 3, 5]), T("i64", [3, 5]), T("f64", [3, 5]),
              T("f32", [4, 5]), T("f32", [7, 2, 3, 5])):
        C("scaled_dot_product_attention", "%q, %k, %v, %m", sd + "(q, k, v, m)", since=(2, 0),
          q=T("f32", [2, 3, 4]), k=T("f32", [2, 5, 4]), v=T("f32", [2, 5, 6]), m=m)
    C("scaled_dot_product_attention", "%q, %k, %v, %m, is_causal=true", sd + "(q, k, v, m, is_causal=True)",
      since=(2, 0), q=T("f32", [2, 3, 4]), k=T("f32", [2, 5, 4]), v=T("f32", [2, 5, 6]), m=T("bool", [3, 5]))
    C("scaled_dot_product_attention", "%q, %k, %v", sd + "(q, k, v)", since=(2, 0),
      q=T("f32", [2, 3, 4]), k=T("f32", [2, 5, 4]), v=T("f64", [2, 5, 6]))
    C("scaled_dot_product_attention", "%q, %k, %v", sd + "(q, k, v)", since=(2, 0),
      q=T("f16", [1, 2, 3, 8]), k=T("f16", [1, 2, 5, 8]), v=T("f16", [1, 2, 5, 8]))


def conv_cases():
    c2 = [([3, 8, 8], [4, 3, 3, 3], None, ""), ([1, 3, 8, 8], [4, 3, 3, 3], None, ", stride=[2, 1], padding=1"),
          ([1, 4, 8, 8], [4, 2, 3, 3], [4], ", groups=2"), ([1, 3, 8, 8], [4, 2, 3, 3], None, ""),
          ([1, 4, 8, 8], [3, 2, 3, 3], None, ", groups=2"), ([1, 3, 2, 2], [4, 3, 3, 3], None, ""),
          ([1, 3, 8, 8], [4, 3, 3, 3], None, ", padding=-1"), ([1, 3, 8, 8], [4, 3, 3, 3], None, ", stride=0"),
          ([1, 3, 8, 8], [4, 3, 3, 3], [5], ""), ([1, 3, 8, 8], [4, 3, 3], None, ""),
          ([2, 3, 7, 9], [5, 3, 2, 4], [5], ", stride=[3, 2], padding=[1, 2], dilation=[2, 1]"),
          ([0, 3, 5, 5], [2, 3, 3, 3], None, ", padding=1")]
    for x, w, b, kw in c2:
        py = kw.replace("[", "(").replace("]", ")")
        if b is None:
            C("conv2d", "%x, %w" + kw, "F.conv2d(x, w%s)" % py, x=T("f32", x, grad=True), w=T("f32", w))
        else:
            C("conv2d", "%x, %w, %b" + kw, "F.conv2d(x, w, b%s)" % py, x=T("f32", x), w=T("f32", w, grad=True),
              b=T("f32", b))
    C("conv2d", "%x, %w", "F.conv2d(x, w)", x=T("f32", [1, 3, 8, 8]), w=T("f64", [4, 3, 3, 3]))
    C("conv2d", "%x, %w", "F.conv2d(x, w)", x=T("i64", [1, 3, 8, 8]), w=T("i64", [4, 3, 3, 3]), since=(2, 0))
    for x, w, kw in [([1, 3, 8], [4, 3, 3], ", dilation=2"), ([3, 8], [4, 3, 3], ", stride=2"),
                     ([1, 3, 8], [4, 3, 9], ""), ([1, 3, 8], [4, 1, 3], ", groups=3"),
                     ([1, 6, 8], [4, 3, 3], ", groups=2, padding=2"), ([1, 3, 8], [4, 3, 3, 3], "")]:
        C("conv1d", "%x, %w" + kw, "F.conv1d(x, w%s)" % kw, x=T("f32", x), w=T("f32", w))
    for x, w, kw in [([1, 3, 4, 5, 6], [2, 3, 1, 2, 3], ""),
                     ([1, 3, 4, 5, 6], [2, 3, 1, 2, 3], ", stride=[1, 2, 3], padding=[0, 1, 1]"),
                     ([3, 4, 5, 6], [2, 3, 1, 1, 1], ""), ([1, 3, 4, 5, 6], [2, 3, 5, 1, 1], ""),
                     ([1, 3, 4, 5, 6], [2, 1, 1, 1, 1], ", groups=3"), ([1, 3, 4, 5], [2, 3, 1, 1, 1], "")]:
        C("conv3d", "%x, %w" + kw, "F.conv3d(x, w%s)" % kw.replace("[", "(").replace("]", ")"),
          x=T("f32", x), w=T("f32", w, grad=True))
    ct = "F.conv_transpose2d"
    for x, w, kw in [([1, 4, 5, 5], [4, 2, 3, 3], ", stride=2, padding=1, output_padding=1"),
                     ([1, 4, 5, 5], [4, 2, 3, 3], ", groups=2"), ([1, 4, 5, 5], [4, 2, 3, 3], ", padding=3"),
                     ([1, 4, 5, 5], [4, 2, 3, 3], ", padding=4"),
                     ([1, 4, 5, 5], [4, 2, 3, 3], ", stride=2, output_padding=2"),
                     ([1, 4, 5, 5], [2, 2, 3, 3], ", groups=2"), ([4, 5, 5], [4, 3, 2, 2], ", stride=2"),
                     ([1, 4, 5, 5], [4, 2, 3, 3], ", stride=[1, 2], dilation=[2, 1], output_padding=[1, 1]")]:
        C("conv_transpose2d", "%x, %w" + kw, "%s(x, w%s)" % (ct, kw.replace("[", "(").replace("]", ")")),
          x=T("f32", x, grad=True), w=T("f32", w))
    cv = "torch.convolution(x, w, None, %s, %s, %s, %s, %s, %d)"
    for x, w, st, pad, dil, tr, op, g in [
            ([1, 3, 8, 8], [4, 3, 3, 3], [1], [0], [1], False, [0], 1),
            ([1, 4, 5, 5], [4, 2, 3, 3], [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
            ([3, 8, 8], [4, 3, 3, 3], [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
            ([1, 3, 8, 8], [4, 3, 3, 3], [1, 1, 1], [0, 0], [1, 1], False, [0, 0], 1),
            ([1, 3, 8], [4, 3, 3], [2], [1], [1], False, [0], 1),
            ([1, 2, 3, 4, 5], [2, 1, 1, 2, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 2)]:
        args = "%%x, %%w, none, %s, %s, %s, %s, %s, %d" % (st, pad, dil, "true" if tr else "false", op, g)
        C("convolution", args, cv % (st, pad, dil, tr, op, g), x=T("f32", x), w=T("f32", w))
    bw = "aten.convolution_backward(g, x, w, None, %s, %s, %s, False, %s, %d, [False, True, False])[1]"
    both = "aten.convolution_backward(g, x, w, None, %s, %s, %s, False, %s, %d, [True, True, False])[:2]"
    for gs, x, w, st, pad, dil, g in [
            ([1, 4, 6, 6], [1, 3, 8, 8], [4, 3, 3, 3], [1, 1], [0, 0], [1, 1], 1),
            ([2, 4, 4, 4], [2, 3, 8, 8], [4, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            ([1, 4, 8, 8], [1, 4, 8, 8], [4, 2, 3, 3], [1, 1], [2, 2], [2, 2], 2),
            ([1, 6, 3], [1, 3, 8], [6, 1, 3], [2], [0], [1], 3),
            ([1, 2, 4, 4, 4], [1, 3, 4, 4, 4], [2, 3, 1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 1, 1], 1),
            ([3, 5, 2, 3], [3, 3, 7, 9], [5, 3, 2, 4], [3, 2], [1, 2], [2, 1], 1)]:
        args = "%%g, %%x, %%w, %s, %s, %s, %d" % (st, pad, dil, g)
        C("convolution_backward_weight", args, bw % (st, pad, dil, [0] * len(st), g),
          g=T("f32", gs), x=T("f32", x), w=T("f32", w, grad=True))
        C("convolution_backward", args, both % (st, pad, dil, [0] * len(st), g),
          g=T("f32", gs), x=T("f32", x, grad=True), w=T("f32", w))
    C("convolution_backward_weight", "%g, %x, %w, [1, 1], [0, 0], [1, 1], 1",
      bw % ([1, 1], [0, 0], [1, 1], [0, 0], 1), g=T("f64", [1, 4, 6, 6]), x=T("f64", [1, 3, 8, 8]),
      w=T("f64", [4, 3, 3, 3]))
    C("convolution_backward", "%g, %x, %w, [1, 1], [0, 0], [1, 1], 1",
      both % ([1, 1], [0, 0], [1, 1], [0, 0], 1), g=T("f64", [1, 4, 6, 6]),
      x=T("f64", [1, 3, 8, 8]), w=T("f64", [4, 3, 3, 3]))


def pool_cases():
    mp = [([1, 1, 5, 5], "[2, 2], ceil_mode=true", "(2, 2), ceil_mode=True"),
          ([1, 1, 5, 5], "[3, 3], [2, 2], [1, 1], ceil_mode=true", "3, 2, 1, ceil_mode=True"),
          ([1, 1, 6, 6], "[3, 3], [2, 2], [1, 1], ceil_mode=true", "3, 2, 1, ceil_mode=True"),
          ([1, 1, 6, 6], "2, 1, ceil_mode=true", "2, 1, ceil_mode=True"),
          ([1, 1, 7, 7], "3, 3, 1, ceil_mode=true", "3, 3, 1, ceil_mode=True"),
          ([1, 1, 5, 5], "3, 2, 1, 2", "3, 2, 1, 2"),
          ([2, 3, 9, 7], "[3, 2], [2, 3], [1, 0], ceil_mode=true", "(3, 2), (2, 3), (1, 0), ceil_mode=True"),
          ([1, 1, 5, 5], "3, padding=2", "3, padding=2"), ([1, 1, 1, 1], "2", "2"), ([5, 5], "2", "2"),
          ([0, 3, 4, 5], "2", "2"), ([1, 3, 0, 5], "2", "2"), ([1, 1, 5, 5], "2, stride=0", "2, stride=0")]
    for x, args, py in mp:
        C("max_pool2d", "%x, " + args, "F.max_pool2d(x, %s)" % py, x=T("f32", x, grad=True))
    C("max_pool2d", "%x, 2", "F.max_pool2d(x, 2)", since=(2, 0), x=T("i64", [1, 5, 5]))
    C("max_pool2d", "%x, 2", "F.max_pool2d(x, 2)", x=T("bool", [1, 5, 5]))
    C("max_pool2d", "%x, [2, 2], []", "aten.max_pool2d(x, [2, 2], [])", x=T("f32", [1, 1, 5, 5]))
    mpi = "aten.max_pool2d_with_indices(x, %s)"
    for x, args, py in [([1, 3, 4, 5], "[2, 2]", "[2, 2]"), ([1, 1, 5, 5], "[3, 3], [2, 2], [1, 1], [1, 1], true",
                                                              "[3, 3], [2, 2], [1, 1], [1, 1], True"),
                        ([3, 6, 6], "[2, 2], [1, 1]", "[2, 2], [1, 1]"), ([1, 1, 1, 1], "[2, 2]", "[2, 2]"),
                        ([1, 1, 5, 5], "[3, 3], [1, 1], [2, 2]", "[3, 3], [1, 1], [2, 2]"),
                        ([4, 4], "[2, 2]", "[2, 2]")]:
        C("max_pool2d_with_indices", "%x, " + args, mpi % py, x=T("f32", x, grad=True))
    ap = "F.avg_pool2d(x, %s)"
    for x, args, py, dt in [([1, 5, 5], "2", "2", "i64"), ([1, 1, 5, 5], "3, 2, 1, true, false", "3, 2, 1, True, False", "f32"),
                            ([1, 5, 5], "2, divisor_override=0", "2, divisor_override=0", "f32"),
                            ([1, 5, 5], "3, padding=2", "3, padding=2", "f32"),
                            ([1, 1, 5, 5], "2, stride=[]", "2, stride=[]", "f32"),
                            ([2, 3, 8, 6], "[3, 2], [2, 1], [1, 1], true", "(3, 2), (2, 1), (1, 1), True", "f16"),
                            ([1, 1, 2, 2], "3", "3", "f32"), ([1, 1, 4, 4], "2, divisor_override=3", "2, divisor_override=3", "bf16")]:
        C("avg_pool2d", "%x, " + args, ap % py, x=T(dt, x, grad=dt == "f32"))
    for x, size, dt in [([1, 3, 5, 5], [2, 3], "f32"), ([3, 0, 5], [2, 3], "f32"), ([0, 3, 5, 5], [2, 3], "f32"),
                        ([3, 5, 5], [2, 3], "i64"), ([2, 8, 7, 7], [1, 1], "f16"), ([1, 3, 5, 5], [7, 9], "f32"),
                        ([5, 5], [1, 1], "f32")]:
        C("adaptive_avg_pool2d", "%%x, %s" % size, "F.adaptive_avg_pool2d(x, %s)" % size, x=T(dt, x, grad=dt == "f32"))


def view_cases():
    x = T("f32", [2, 3, 4], grad=True)
    for size in ([-1, 4], [24], [-1, -1], [5, -1], [-2, 12], [4, 3, 2], [2, 3, 4, 1], [-1]):
        C("view", "%%x, %s" % size, "x.view(%s)" % size, x=x)
        C("reshape", "%%x, %s" % size, "x.reshape(%s)" % size, x=x)
    for op in ("view", "reshape"):
        C(op, "%x, [0, -1]", "x.%s(0, -1)" % op, x=T("f32", [0, 3]))
        C(op, "%x, [-1]", "x.%s(-1)" % op, x=T("f32", [0, 3]))
        C(op, "%x, [6, 4]", "x.%s(6, 4)" % op, x=T("f32", [2, 4, 3], strides=[12, 1, 4]))
        C(op, "%x, [3, 8]", "x.%s(3, 8)" % op, x=T("f32", [3, 2, 4], strides=[4, 12, 1]))
        C(op, "%x, [6, 2]", "x.%s(6, 2)" % op, x=T("f32", [2, 3, 2], strides=[12, 4, 2]))
        C(op, "%x, [1]", "x.%s(1)" % op, x=T("i64", []))
    for args, py in [("", ""), ("1", "1"), ("1, 2", "1, 2"), ("-2, -1", "-2, -1"), ("2, 1", "2, 1"),
                     ("0, 3", "0, 3")]:
        C("flatten", "%x" + (", " + args if args else ""), "torch.flatten(x%s)" % (", " + py if py else ""), x=x)
    C("flatten", "%x", "torch.flatten(x)", x=T("f32", []))
    C("flatten", "%x, 1", "torch.flatten(x, 1)", x=T("f32", []))
    C("flatten", "%x, -1, 0", "torch.flatten(x, -1, 0)", x=T("f32", []))
    C("flatten", "%x, 1", "torch.flatten(x, 1)", x=T("bool", [2, 0, 3]))
    for dims in ([2, 0, 1], [-1, 0, 1], [0, 0, 1], [0, 1], [0, 1, 3]):
        C("permute", "%%x, %s" % dims, "x.permute(%s)" % dims, x=x)
    C("permute", "%x, []", "x.permute([])", x=T("f32", []))
    for a, b in ((0, -1), (1, 2), (0, 3), (-3, -2), (2, 2)):
        C("transpose", "%%x, %d, %d" % (a, b), "torch.transpose(x, %d, %d)" % (a, b), x=x)
    C("transpose", "%x, 0, -1", "torch.transpose(x, 0, -1)", x=T("f32", []))
    for shape in ([2, 3], [3], [], [2, 3, 4], [0, 5]):
        C("t", "%x", "torch.t(x)", x=T("f32", shape))
    for size, shape in [([2, -1, -1, -1], [2, 3, 4]), ([3, 0], [3, 1]), ([-1, 2, 3, 4], [2, 3, 4]),
                        ([2, 4, 4], [2, 3, 4]), ([3, 4], [2, 3, 4]), ([5, 3], [1, 3]), ([2, 3, 4], [])]:
        C("expand", "%%x, %s" % size, "x.expand(%s)" % size, x=T("f32", shape, grad=True))
    for dims, shape, since in [(None, [1, 2, 1], None), ([0, 1], [1, 2, 1], (2, 0)), ([0], [], (2, 0)),
                               ([0, 0], [1, 2], (2, 0)), ([2], [1, 2], (2, 0)), ([-1], [3, 1], (2, 0)),
                               (None, [1, 0, 1], None)]:
        if dims is None:
            C("squeeze", "%x", "torch.squeeze(x)", x=T("f32", shape))
        else:
            C("squeeze", "%%x, %s" % dims, "torch.squeeze(x, %s)" % tuple(dims).__repr__(), since=since,
              x=T("f32", shape))
    for d, shape in [(-1, [2, 3]), (1, [2, 3]), (0, []), (1, []), (-4, [2, 3]), (3, [2, 3])]:
        C("unsqueeze", "%%x, %d" % d, "torch.unsqueeze(x, %d)" % d, x=T("f32", shape, grad=True))


def slice_cases():
    x = T("f32", [2, 3, 4], grad=True)
    sl = "aten.slice.Tensor(x, %s)"
    for args in ("1, 5", "1, -10, 2", "1, 2, 1", "1, step=2", "-1, 1, 1000000000", "2, -3, -1",
                 "2, step=0", "0, none, none, 3", "3"):
        py = args.replace("none", "None")
        C("slice", "%x, " + args, sl % py, x=x)
    C("slice", "%x", "aten.slice.Tensor(x)", x=T("f32", []))
    C("slice", "%x, 0, 1", "aten.slice.Tensor(x, 0, 1)", x=T("f32", [0, 2]))
    for d, i in ((1, -3), (1, 3), (0, 1), (-1, 3), (2, -5)):
        C("select", "%%x, %d, %d" % (d, i), "torch.select(x, %d, %d)" % (d, i), x=x)
    C("select", "%x, 0, 0", "torch.select(x, 0, 0)", x=T("f32", []))
    for d, s, n in ((2, -4, 2), (2, 4, 0), (2, -5, 2), (2, 3, 2), (0, 1, 1), (1, 0, -1)):
        C("narrow", "%%x, %d, %d, %d" % (d, s, n), "torch.narrow(x, %d, %d, %d)" % (d, s, n), x=x)


def index_cases():
    x = T("f32", [2, 3, 4], grad=True)
    ix = "aten.index.Tensor(x, [%s])"
    for args, inputs in [("%i", dict(i=I("i64", [2]))), ("none, %i", dict(i=I("i64", [2]))),
                         ("%i, none, %i", dict(i=I("i64", [2]))), ("%i, %i", dict(i=I("i64", [2]))),
                         ("none, %i, %i", dict(i=I("i64", [2]))), ("%i, none, %j", dict(i=I("i64", [2, 1]), j=I("i64", [2]))),
                         ("none, none, %i", dict(i=I("i64", [2]))), ("none, %i, %j", dict(i=I("i64", [5, 1]), j=I("i64", [3]))),
                         ("%i", dict(i=T("f32", [2]))),
                         ("%i, %i, %i, %i", dict(i=I("i64", [2]))), ("%i, %j", dict(i=I("i64", [2]), j=I("i64", [3]))),
                         ("%i", dict(i=I("i64", [0, 2]))), ("%i, none", dict(i=I("i64", [])))]:
        py = args.replace("%", "").replace("none", "None")
        C("index", "%x, [" + args + "]", ix % py, x=x, **inputs)
    C("index", "%x, [none, %i, %j]", ix % "None, i, j", since=(2, 0), x=x, i=I("i32", [5, 1]), j=I("i64", [3]))
    mask = "ptc rejects boolean masks: the result size depends on the mask's values"
    C("index", "%x, [%m]", ix % "m", rejects=mask, x=x, m=T("bool", [2, 3]))
    C("index", "%x, [none, %m]", ix % "None, m", rejects=mask, x=x, m=T("u8", [3]))
    isel = "torch.index_select(x, %d, i)"
    for d, i in [(1, I("i64", [2])), (-1, I("i32", [])), (1, I("i64", [1, 2])), (1, T("f32", [2])),
                 (3, I("i64", [2])), (0, I("i64", [0]))]:
        C("index_select", "%%x, %d, %%i" % d, isel % d, x=x, i=i)
    C("index_select", "%x, 0, %i", "torch.index_select(x, 0, i)", x=T("f32", []), i=I("i64", [1]))
    C("gather", "%x, 1, %i", "torch.gather(x, 1, i)", since=(2, 0), x=x, i=I("i32", [2, 2, 4]))
    for d, i in [(1, I("i64", [2, 2, 4])), (1, I("i64", [2, 5, 5])),
                 (1, I("i64", [2, 2])), (-1, I("i64", [1, 1, 9])), (0, I("i64", [0, 3, 4])),
                 (1, T("f32", [2, 2, 4], fill=0))]:
        C("gather", "%%x, %d, %%i" % d, "torch.gather(x, %d, i)" % d, x=x, i=i)
    for w, i in [([5, 3], I("i64", [1, 2])), ([5, 3], I("i32", [])), ([5, 3], T("f32", [2], fill=0)),
                 ([5, 3, 2], I("i64", [2])), ([5, 3], I("i64", [0, 4]))]:
        C("embedding", "%w, %i", "F.embedding(i, w)", w=T("f32", w, grad=True), i=i)
    C("embedding", "%w, %i, 0", "F.embedding(i, w, 0)", w=T("f16", [4, 8]), i=I("i64", [2, 3]))


def cat_cases():
    for ts, d in [([[2, 3], [0]], 0), ([[0], [0]], 0), ([[2, 3], [2, 3]], 1), ([[2, 3], [0, 3]], 0),
                  ([[2, 3], [2, 0]], -1), ([[2, 3], [3, 3]], 1), ([[2, 3], [3]], 1), ([[], []], 0),
                  ([[2, 3], [2, 0]], 0), ([[2, 3]], 2), ([[0], [2, 3], [0], [1, 3]], 0)]:
        names = ["a%d" % i for i in range(len(ts))]
        ins = {n: T("f32", s, grad=i == 0) for i, (n, s) in enumerate(zip(names, ts))}
        C("cat", "[%s], %d" % (", ".join("%" + n for n in names), d), "torch.cat([%s], %d)" % (", ".join(names), d),
          **ins)
    C("cat", "[%a, %b], 1", "torch.cat([a, b], 1)", a=T("f32", [2, 3]), b=T("i64", [2, 3]))
    C("cat", "[%a, %b]", "torch.cat([a, b])", a=T("f32", [0]), b=T("f64", [0]))
    C("cat", "[%a, %b]", "torch.cat([a, b])", a=T("u8", [2]), b=T("i8", [3]))
    for ts, d in [([[2], [2]], 1), ([[2, 3], [2, 3], [2, 3]], 0), ([[], []], 0), ([[2], [3]], 0),
                  ([[2], [2]], 2), ([[2, 4], [2, 4]], -1), ([[2], [2]], -3)]:
        names = ["a%d" % i for i in range(len(ts))]
        ins = {n: T("f32", s) for n, s in zip(names, ts)}
        C("stack", "[%s], %d" % (", ".join("%" + n for n in names), d),
          "torch.stack([%s], %d)" % (", ".join(names), d), **ins)
    C("stack", "[%a, %b], 1", "torch.stack([a, b], 1)", a=T("f32", [2], grad=True), b=T("f16", [2]))


def split_cases():
    x = T("f32", [2, 5, 4], grad=True)
    for args in ("2, 1", "0, 1", "5, 1", "1, -1", "7", "3, 3"):
        C("split", "%x, " + args, "aten.split.Tensor(x, %s)" % args, x=x)
    C("split", "%x, 0", "aten.split.Tensor(x, 0)", x=T("f32", [0]))
    C("split", "%x, 2", "aten.split.Tensor(x, 2)", x=T("f32", [0]))
    for sizes in ([2, 3], [2, 2], [2, -1, 4], [5], [0, 5, 0], [1, 1, 1, 1, 1]):
        C("split_with_sizes", "%%x, %s, 1" % sizes, "aten.split_with_sizes(x, %s, 1)" % sizes, x=x)
    for args in ("4, 1", "0, 1", "1, 1", "5, 1", "6, -2", "3, 3"):
        C("chunk", "%x, " + args, "torch.chunk(x, %s)" % args, x=x)
    C("chunk", "%x, 4", "torch.chunk(x, 4)", x=T("f32", [6]))
    C("chunk", "%x, 3", "torch.chunk(x, 3)", x=T("f32", [0, 3]))
    for d, shape in ((1, [2, 3, 4]), (0, []), (-1, [2, 2]), (0, [1, 3]), (3, [2, 3, 4])):
        C("unbind", "%%x, %d" % d, "torch.unbind(x, %d)" % d, x=T("f32", shape, grad=True))


def misc_shape_cases():
    for op, fn in (("contiguous", "x.contiguous()"), ("clone", "torch.clone(x)")):
        for x in (T("f32", [2, 3], strides=[1, 2]), T("i64", [3], grad=False), T("f32", [2, 0], grad=True),
                  T("bool", []), T("f16", [4, 1, 2], grad=True)):
            C(op, "%x", fn, x=x)
    x = T("f32", [2, 5, 4], grad=True)
    for args, py in [("[1]", "1"), ("[1, 2], [0, -1]", "(1, 2), (0, -1)"), ("[1, 2], [0]", "(1, 2), (0,)"),
                     ("[1, 2]", "(1, 2)"), ("[1], [3]", "1, 3"), ("[-3], [1]", "-3, 1")]:
        C("roll", "%x, " + args, "torch.roll(x, %s)" % py, x=x)
    for op in ("triu", "tril"):
        for shape, d in (([3, 4], 1), ([2, 3, 4], -1), ([3], 0), ([], 0), ([0, 2], 0), ([4, 4], 9)):
            C(op, "%%x, %d" % d, "torch.%s(x, %d)" % (op, d), x=T("f32", shape, grad=True))
        C(op, "%x", "torch.%s(x)" % op, x=T("bool", [2, 2]))
    cp = "torch.constant_pad_nd(x, %s%s)"
    for pad, v in [([1, 2], ""), ([1, 2, 0, 1, 3, 3], ", 1.5"), ([-3, -1], ""), ([1, 2, 3], ""),
                   ([1] * 8, ""), ([-3, -2], ""), ([0, 0], ""), ([-4, 0], "")]:
        C("constant_pad_nd", "%%x, %s%s" % (pad, v), cp % (pad, v), x=x)
    C("constant_pad_nd", "%x, [1, 1], 2", "torch.constant_pad_nd(x, [1, 1], 2)", x=T("i64", [3]))
    for reps, shape in [([1, 1, 1, 2], [2, 5, 4]), ([2, 1], [3, 4]), ([0, 2], [3]), ([2], [2, 5]),
                        ([-1, 1, 1], [2, 5, 4]), ([2, 3], []), ([1, 1], [0, 3])]:
        C("repeat", "%%x, %s" % reps, "x.repeat(%s)" % reps, x=T("f32", shape, grad=True))


def creation_cases():
    for args, py in [("[2, 3], true", "(2, 3), True"), ("[2, 3], 2", "(2, 3), 2"), ("[2, 3], 2.5", "(2, 3), 2.5"),
                     ("[2, 3], 2.5, dtype=i64", "(2, 3), 2.5, dtype=torch.int64"),
                     ("[], true, dtype=f16", "(), True, dtype=torch.float16"),
                     ("[-1, 3], 2.5", "(-1, 3), 2.5"), ("[0, 4], -1", "(0, 4), -1")]:
        C("full", args, "torch.full(%s)" % py)
    for op in ("zeros", "ones", "empty"):
        for args, py in [("[2]", "2"), ("[2, 0]", "2, 0"), ("[], dtype=bool", "(), dtype=torch.bool"),
                         ("[3], dtype=i32", "3, dtype=torch.int32"), ("[2, -1]", "2, -1"),
                         ("[1, 2, 3], dtype=bf16", "1, 2, 3, dtype=torch.bfloat16")]:
            C(op, args, "torch.%s(%s)" % (op, py))
    for op in ("rand", "randn"):
        for args, py in [("[2, 3]", "2, 3"), ("[2], dtype=f16", "2, dtype=torch.float16"),
                         ("[2], dtype=i64", "2, dtype=torch.int64"), ("[2, -1]", "2, -1"),
                         ("[], dtype=f64", "(), dtype=torch.float64"), ("[0, 3], seed=5", "0, 3")]:
            C(op, args, "torch.%s(%s)" % (op, py))
    for args, py in [("0, 10, 3", "0, 10, 3"), ("10, 0, -3", "10, 0, -3"), ("0, 1, 0.1", "0, 1, 0.1"),
                     ("0, 5.5, dtype=i64", "0, 5.5, dtype=torch.int64"),
                     ("0, 5.5, dtype=i32", "0, 5.5, dtype=torch.int32"),
                     ("0.5, 5, dtype=i64", "0.5, 5, dtype=torch.int64"), ("false, true", "False, True"),
                     ("0, 10, 2.5, dtype=f16", "0, 10, 2.5, dtype=torch.float16"), ("2, 2", "2, 2"),
                     ("0.0, 3", "0.0, 3"), ("0, 10, 0", "0, 10, 0"),
                     ("10, 0, 1", "10, 0, 1"), ("0, inf", "0, float('inf')"), ("-1.5, 2.25, 0.5", "-1.5, 2.25, 0.5"),
                     ("1, 2, 0.3, dtype=f64", "1, 2, 0.3, dtype=torch.float64"),
                     ("0, 1, 0.1, dtype=bf16", "0, 1, 0.1, dtype=torch.bfloat16")]:
        C("arange", args, "torch.arange(%s)" % py)
    for x, args, py in [(T("f32", [2, 3], grad=True), "dtype=f16", "torch.float16"),
                        (T("f32", [2, 3], grad=True), "dtype=i64", "torch.int64"),
                        (T("i64", [2]), "dtype=f32", "torch.float32"), (T("bool", []), "dtype=u8", "torch.uint8"),
                        (T("bf16", [0, 2]), "device=cpu", "'cpu'"), (T("f16", [3]), "", None)]:
        C("to", "%x" + (", " + args if args else ""), "x.to(%s)" % py if py else "x.to(x.dtype)", x=x)


# ---- prims cases --------------------------------------------------------------

PRIM_UNARY = ["abs", "neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
              "erf", "reciprocal", "floor", "ceil", "round", "trunc", "sign", "bitwise_not",
              "logical_not", "isnan"]
PRIM_BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "fmod", "pow", "maximum", "minimum",
               "atan2", "copysign", "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt",
               "ge"]


def prim_cases():
    for name in PRIM_UNARY:
        for x in (T("f32", [2, 3], grad=True), T("f16", []), T("i64", [2, 0]), T("bool", [3]),
                  T("i32", [4]), T("bf16", [1, 2])):
            C("prims." + name, "%a", "prim_unary(%r, a)" % name, a=x)
    for name in PRIM_BINARY:
        for a, b in [(T("f32", [2, 3], grad=True), T("f32", [2, 3])), (T("f32", [2, 3]), T("f32", [3])),
                     (T("f32", [3]), T("f16", [3])), (T("i64", [2]), T("i64", [2])),
                     (T("bool", [2]), T("bool", [2])), (T("u8", [0, 2]), T("u8", [0, 2])),
                     (T("f64", []), T("f64", []))]:
            C("prims." + name, "%a, %b", "prim_binary(%r, a, b)" % name, a=a, b=b)
    for p, a in [(T("bool", [3]), T("f32", [3], grad=True)), (T("bool", [1]), T("f32", [3])),
                 (T("u8", [3]), T("f32", [3])), (T("bool", [2, 2]), T("i64", [2, 2])), (T("bool", []), T("f16", []))]:
        C("prims.where", "%p, %a, %a", "prim_where(p, a, a)", p=p, a=a)
    C("prims.where", "%p, %a, %b", "prim_where(p, a, b)", p=T("bool", [3]), a=T("f32", [3]), b=T("f16", [3]))
    for a, dt in [(T("f32", [2], grad=True), "f16"), (T("f32", [2], grad=True), "i32"), (T("bool", [2, 3]), "f32"),
                  (T("i64", []), "bool"), (T("bf16", [0]), "f64")]:
        C("prims.convert_element_type", "%%a, %s" % dt, "a.to(torch.%s)" % str(DT[dt]).split(".")[1], a=a)
    for a in (T("f32", [2]), T("i64", [2, 3], grad=False), T("f32", [], grad=True), T("bool", [0]), T("f16", [1])):
        C("prims.device_put", "%a, cpu", "a.to('cpu')", a=a)
    for a in (T("f32", [2, 3], grad=True), T("f16", []), T("i64", [2, 0]), T("bf16", [1, 2]), T("f64", [3])):
        C("prims.stop_gradient", "%a", "a.clone()", a=a)
    for a, shape, bd in [([3], [2, 3], [1]), ([1, 3], [4, 2, 3], [0, 2]), ([], [2], []), ([1, 3], [4, 2, 3], [2, 0]),
                         ([2, 3], [4, 2, 3], [0, 2]), ([3], [2, 3], []), ([2], [2, 0], [0])]:
        C("prims.broadcast_in_dim", "%%a, %s, %s" % (shape, bd), "prim_broadcast_in_dim(a, %s, %s)" % (shape, bd),
          a=T("f32", a, grad=True))
    for a, shape in [([2, 3], [3, 2]), ([2, 3], [-1]), ([2, 3], [4]), ([0, 3], [3, 0, 5]), ([], [1, 1]), ([4], [])]:
        C("prims.reshape", "%%a, %s" % shape, "prim_reshape(a, %s)" % shape, a=T("f32", a))
    for a, dims in [([2, 3, 4], [2, 0, 1]), ([2, 3, 4], [-1, 0, 1]), ([2, 3], [0, 0]), ([], []), ([2, 3], [1, 0])]:
        C("prims.permute", "%%a, %s" % dims, "prim_permute(a, %s)" % dims, a=T("f32", a))
    for a, s, lim, st in [([10, 4], [1, 0], [9, 4], [2, 1]), ([10, 4], [1, 0], [9, 4], []), ([10, 4], [1, 0], [11, 4], []),
                          ([10, 4], [5, 0], [4, 4], []), ([10, 4], [0, 0], [4, 4], [0, 1]), ([3], [3], [3], []),
                          ([10, 4], [0], [4], [])]:
        C("prims.slice", "%%a, %s, %s, %s" % (s, lim, st), "prim_slice(a, %s, %s, %s)" % (s, lim, st), a=T("f32", a))
    for a, cfg in [([2, 3], [1, 1, 0, -1, 0, 0]), ([2, 3], [1, 1, 0]), ([2, 3], [0, 0, 0, -2, -2, 0]),
                   ([2, 3], [0, 0, 0, -3, 0, 0]), ([], []), ([0], [2, 3, 4]), ([2, 3], [0, 0, 2, 1, 1, 1]),
                   ([4], [-2, -3, 1]), ([4], [0, 0, -1])]:
        C("prims.pad", "%%a, 0, %s" % cfg, "prim_pad(a, 0, %s)" % cfg, a=T("f32", a))
    for ts, d in [([[2, 3], [2, 5]], 1), ([[2, 3], [4, 3], [1, 3]], 0), ([[2, 3], [2, 5]], -1), ([[0], [2, 5]], 0),
                  ([[2, 3], [2, 5]], 0), ([[2]], 0)]:
        names = ["a%d" % i for i in range(len(ts))]
        C("prims.cat", "[%s], %d" % (", ".join("%" + n for n in names), d),
          "prim_cat([%s], %d)" % (", ".join(names), d), **{n: T("f32", s) for n, s in zip(names, ts)})
    C("prims.cat", "[%a, %b], 0", "prim_cat([a, b], 0)", a=T("f32", [2]), b=T("f16", [2]))
    for args, py in [("5, start=0, step=1, dtype=i64, device=cpu", "5, 0, 1, torch.int64"),
                     ("0, start=3, step=2, dtype=i32, device=cpu", "0, 3, 2, torch.int32"),
                     ("4, start=1, step=3, dtype=f32, device=cpu", "4, 1, 3, torch.float32"),
                     ("-1, start=0, step=1, dtype=i64, device=cpu", "-1, 0, 1, torch.int64"),
                     ("3, start=0, step=1, dtype=bool, device=cpu", "3, 0, 1, torch.bool")]:
        C("prims.iota", args, "prim_iota(%s)" % py)
    for args, py in [("[2, 3], 1, dtype=f16, device=cpu", "[2, 3], 1, torch.float16"),
                     ("[], true, dtype=bool, device=cpu", "[], True, torch.bool"),
                     ("[0, 2], 2.5, dtype=i64, device=cpu", "[0, 2], 2.5, torch.int64"),
                     ("[2, -1], 0, dtype=f32, device=cpu", "[2, -1], 0, torch.float32"),
                     ("[4], 7, dtype=u8, device=cpu", "[4], 7, torch.uint8")]:
        C("prims.full", args, "prim_full(%s)" % py)
    for op in ("rand", "randn"):
        for args, py in [("[2, 3], dtype=f32, device=cpu, seed=1", "[2, 3], 0, torch.float32"),
                         ("[2], dtype=i32, device=cpu, seed=1", "[2], 0, torch.int32"),
                         ("[], dtype=bf16, device=cpu, seed=1", "[], 0, torch.bfloat16"),
                         ("[0], dtype=f64, device=cpu, seed=1", "[0], 0, torch.float64"),
                         ("[-1], dtype=f32, device=cpu, seed=1", "[-1], 0, torch.float32")]:
            C("prims." + op, args, "prim_full(%s, random=True)" % py)
    for name in ("sum", "prod", "amax", "amin"):
        for a, dims in [(T("f32", [2, 3, 4], grad=True), [0, 2]), (T("f32", [2, 3]), []), (T("i64", [2, 3]), [1]),
                        (T("bool", [2, 3]), [1]), (T("f32", [2, 3]), [-1]), (T("f32", [2, 3]), [1, 1]),
                        (T("f32", [2, 0]), [1]), (T("f16", []), [])]:
            C("prims." + name, "%%a, %s" % dims, "prim_reduce(%r, a, %s)" % (name, dims), a=a)
    for name in ("argmax", "argmin"):
        for a, d in [(T("f32", [2, 3]), 1), (T("f32", [2, 3]), 2), (T("i32", [2, 3]), 0), (T("bool", [3]), 0),
                     (T("f32", [2, 0]), 1), (T("f32", [2, 0]), 0)]:
            C("prims." + name, "%%a, %d" % d, "prim_argreduce(a, %d)" % d, a=a)
    for a, dims in [(T("f32", [2, 3], grad=True), [0]), (T("i32", [2, 3]), [0]), (T("f16", [2, 3, 4]), [0, 2]),
                    (T("f32", [2, 3]), []), (T("f32", [2, 3]), [2])]:
        C("prims.var_mean", "%%a, %s, 1.0" % dims, "prim_var_mean(a, %s)" % dims, a=a)
    for a, d in [(T("i32", [2, 3]), 1), (T("bool", [2, 3]), 1), (T("f32", [2, 3], grad=True), 0),
                 (T("f32", [2, 3]), 2), (T("f16", []), 0), (T("f32", [2, 3]), -1)]:
        C("prims.cumsum", "%%a, %d" % d, "prim_cumsum(a, %d)" % d, a=a)
        C("prims.cumprod", "%%a, %d" % d, "prim_cumsum(a, %d, torch.cumprod)" % d, a=a)
    for a, d, i in [([2, 3], 1, I("i64", [2, 2])), ([2, 3], 1, I("i32", [2, 2])), ([2, 3], 0, I("i64", [5, 3])),
                    ([2, 3], 1, I("i64", [2])), ([2, 3], 1, I("i64", [3, 2])), ([4], 0, I("i64", [0]))]:
        C("prims.gather", "%%a, %d, %%i" % d, "prim_gather(a, %d, i)" % d, a=T("f32", a, grad=True), i=i)
    for a, d, i in [([2, 3], 0, I("i64", [4])), ([2, 3], 1, I("i32", [])), ([2, 3], 1, I("i64", [2, 2])),
                    ([2, 3], 2, I("i64", [1])), ([2, 3], -1, I("i64", [0]))]:
        C("prims.index_select", "%%a, %d, %%i" % d, "torch.index_select(a, %d, i)" % d, a=T("f32", a), i=i)
    # sizes of 8 and more: the corpus test runs the graphs on indices in [-8, 8)
    for i, size, nth in [(I("i64", [3]), 8, 0), (I("i64", [2, 3]), 9, 1), (I("i64", []), 8, 0),
                         (I("i64", [0]), 8, 0), (I("i64", [4, 1]), 16, 2), (I("i32", [3]), 8, 0)]:
        C("prims.check_index", "%%i, %d, %d" % (size, nth), "prim_check_index(i, %d, %d)" % (size, nth), i=i)
    for a, i, s, d in [([5, 3], I("i64", [2, 3]), T("f32", [2, 3]), 0), ([5, 3], I("i64", [2, 3]), T("f16", [2, 3]), 0),
                       ([5, 3], I("i64", [2, 4]), T("f32", [2, 4]), 0), ([5, 3], I("i64", [3, 3]), T("f32", [2, 3]), 0),
                       ([5, 3], I("i32", [2, 3]), T("f32", [2, 3]), 0), ([5, 3], I("i64", [5, 2]), T("f32", [5, 3]), 1),
                       ([5, 3], I("i64", [2]), T("f32", [2]), 0)]:
        C("prims.scatter_add", "%%a, %d, %%i, %%s" % d, "prim_scatter_add(a, %d, i, s)" % d,
          a=T("f32", a, grad=True), i=i, s=s)
        C("prims.scatter", "%%a, %d, %%i, %%s" % d, "prim_scatter(a, %d, i, s)" % d,
          a=T("f32", a, grad=True), i=i, s=s)
        for op in ("scatter", "scatter_add"):
            C(op, "%%a, %d, %%i, %%s" % d, "torch.%s(a, %d, i, s)" % (op, d),
              a=T("f32", a, grad=True), i=i, s=s)


# ---- sweeps: systematic grids over the rules most easily got wrong ---------------

ALL_DTYPES = ["bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"]


def promotion_sweep():
    """torch.result_type over every dtype pair, as dimensioned or 0-dim
    tensors, and against Python scalars."""
    for a in ALL_DTYPES:
        for b in ALL_DTYPES:
            for sa, sb in (([2], [2]), ([2], []), ([], [2]), ([], [])):
                C("mul", "%x, %y", "torch.mul(x, y)", x=T(a, sa), y=T(b, sb))
        for scalar in ("3", "2.5", "true"):
            for shape in ([2], []):
                C("mul", "%%x, %s" % scalar, "torch.mul(x, %s)" % py_scalar(scalar), x=T(a, shape))


def dtype_sweep():
    """Each dtype through the ops whose dtype rules differ (float-only ops,
    integer accumulation, bool/int-only ops, promotion inside cat)."""
    for dt in ALL_DTYPES:
        for op in ("sum", "prod", "mean", "amax", "argmax", "any", "var", "logsumexp"):
            dim = "0" if op in ("prod", "argmax") else "[0]"
            C(op, "%%x, %s" % dim, "torch.%s(x, %s)" % (op, dim), since=(2, 2) if op == "any" else None,
              x=T(dt, [2, 3]))
        for op, fn in (("cumsum", "torch.cumsum(x, 1)"), ("softmax", "torch.softmax(x, 1)"),
                       ("sigmoid", "torch.sigmoid(x)"), ("relu", "torch.relu(x)"),
                       ("gelu", "F.gelu(x)"), ("sign", "torch.sign(x)")):
            C(op, "%x" + (", 1" if op in ("cumsum", "softmax") else ""), fn, x=T(dt, [2, 3]))
        for b in ALL_DTYPES:
            for op in ("bitwise_and", "div", "atan2", "maximum", "eq"):
                C(op, "%x, %y", "torch.%s(x, y)" % op, x=T(dt, [2]), y=T(b, [2]))
            C("div", '%x, %y, rounding_mode="floor"', 'torch.div(x, y, rounding_mode="floor")',
              x=T(dt, [2]), y=T(b, [2]))
            C("cat", "[%x, %y]", "torch.cat([x, y])", x=T(dt, [2]), y=T(b, [3]))
            C("where", "%c, %x, %y", "torch.where(c, x, y)", c=T("bool", [2]), x=T(dt, [2]), y=T(b, []))


def pool_sweep():
    """Pooling output sizes (ceil_mode's last-window rule included), two
    configurations per case (one per spatial dim)."""
    combos = []
    for n in (1, 2, 3, 4, 5, 6, 7, 9):
        for k in (1, 2, 3):
            for p in range(k // 2 + 1):
                for st in (1, 2, 3):
                    for d in (1, 2):
                        combos.append((n, k, st, p, d))
    for ceil in (False, True):
        for (h, kh, sh, ph, dh), (w, kw, sw, pw, dw) in zip(combos[0::2], combos[1::2]):
            args = "[%d, %d], [%d, %d], [%d, %d], [%d, %d], %s" % (kh, kw, sh, sw, ph, pw, dh, dw,
                                                                 "true" if ceil else "false")
            py = "(%d, %d), (%d, %d), (%d, %d), (%d, %d), %s" % (kh, kw, sh, sw, ph, pw, dh, dw, ceil)
            C("max_pool2d", "%x, " + args, "F.max_pool2d(x, %s)" % py, x=T("f32", [1, 2, h, w]))
    for (h, kh, sh, ph, _), (w, kw, sw, pw, _) in zip(combos[0::4], combos[2::4]):
        args = "[%d, %d], [%d, %d], [%d, %d], true" % (kh, kw, sh, sw, ph, pw)
        py = "(%d, %d), (%d, %d), (%d, %d), True" % (kh, kw, sh, sw, ph, pw)
        C("avg_pool2d", "%x, " + args, "F.avg_pool2d(x, %s)" % py, x=T("f32", [2, h, w]))


def conv_sweep():
    """Convolution output sizes, plain and transposed."""
    for n in (1, 3, 4, 7):
        for k in (1, 2, 3):
            for st in (1, 2, 3):
                for p in (0, 1, 2):
                    for d in (1, 2):
                        C("conv1d", "%%x, %%w, stride=%d, padding=%d, dilation=%d" % (st, p, d),
                          "F.conv1d(x, w, stride=%d, padding=%d, dilation=%d)" % (st, p, d),
                          x=T("f32", [1, 2, n]), w=T("f32", [3, 2, k]))
    for n in (1, 2, 4):
        for k in (1, 3):
            for st in (1, 2, 3):
                for p in (0, 1, 2):
                    for op in (0, 1, 2):
                        kw = "stride=[%d, 1], padding=[%d, 0], output_padding=[%d, 0]" % (st, p, op)
                        py = "stride=(%d, 1), padding=(%d, 0), output_padding=(%d, 0)" % (st, p, op)
                        C("conv_transpose2d", "%x, %w, " + kw, "F.conv_transpose2d(x, w, %s)" % py,
                          x=T("f32", [1, 2, n, 2]), w=T("f32", [2, 1, k, 1]))


def slice_sweep():
    """aten.slice's clamping of start and end, negatives and None."""
    bounds = (None, -9, -3, -1, 0, 2, 7, 9)
    for start in bounds:
        for end in bounds:
            for step in (1, 3):
                a = "%s, %s, %d" % ("none" if start is None else start, "none" if end is None else end, step)
                C("slice", "%x, 0, " + a, "aten.slice.Tensor(x, 0, %s, %s, %d)" % (start, end, step),
                  x=T("f32", [7, 2]))


def size_sweep():
    """chunk/split piece sizes, arange lengths and view's -1."""
    for n in range(0, 10):
        for chunks in range(1, 6):
            C("chunk", "%%x, %d" % chunks, "torch.chunk(x, %d)" % chunks, x=T("f32", [n, 2]))
        for piece in (1, 2, 3, 4):
            C("split", "%%x, %d" % piece, "aten.split.Tensor(x, %d)" % piece, x=T("f32", [n]))
    for start, end, step in ((0, 7, 2), (7, 0, -2), (-3, 4, 3), (1, 1, 5), (0, 1, 3), (5, 2, -1),
                             (0.5, 3, 0.5), (-1.25, 2, 0.75), (3, -2.5, -0.5), (0, 2.9, 1), (1e-3, 1, 0.1),
                             (2, 3, 0.3), (-7, 7, 7)):
        a = "%r, %r, %r" % (start, end, step)
        for dt, py in (("", ""), (", dtype=i64", ", dtype=torch.int64"), (", dtype=f64", ", dtype=torch.float64"),
                       (", dtype=i16", ", dtype=torch.int16")):
            if "dtype=i" in dt and int(step) == 0:
                continue  # torch divides by the truncated step: SIGFPE
            C("arange", a + dt, "torch.arange(%s%s)" % (a, py))
    for shape in ([2, 6], [4, 3, 2], [0, 6], [1], [12, 1]):
        for size in ([-1], [3, -1], [-1, 4], [2, -1, 3], [-1, 0], [5, -1], [1, -1, 1]):
            C("view", "%%x, %s" % size, "x.view(%s)" % size, x=T("f32", shape))


# ---- running the cases and writing the files -----------------------------------

NRETURNS2 = {"max_pool2d_with_indices", "prims.var_mean", "convolution_backward", "sort", "topk",
             "cummax", "cummin"}


def run_case(case):
    """-> ("ok", [tensors]) | ("error", message) | ("skip", why)."""
    if case.since and TORCH_VERSION < case.since:
        return "skip", "needs torch %d.%d" % case.since
    env = dict(torch=torch, F=F, aten=aten, bn=bn, **{k: v for k, v in globals().items()
                                                       if k.startswith("prim_")})
    try:
        env.update({name: t.make() for name, t in case.inputs.items()})
    except Exception as e:  # noqa: BLE001 - an input torch cannot create
        return "skip", "input: %s" % e
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = eval(case.expr, env)  # noqa: S307 - our own case table
    except (AttributeError, NameError) as e:
        return "skip", "missing in this torch: %s" % e
    except Exception as e:  # noqa: BLE001 - torch's invalid-argument errors are the point
        if TORCH_VERSION < (2, 0) and re.search(r"not implemented for '(Half|BFloat16)'", str(e)):
            return "skip", "torch 1.x lacks this CPU half-precision kernel"
        return "error", "%s: %s" % (type(e).__name__, str(e).strip().split("\n")[0][:200])
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs:
        return "skip", "no outputs"
    return "ok", outs


def out_type(t):
    s = "%s[%s]" % (PTIR_NAME[t.dtype], ",".join(str(d) for d in t.shape))
    return s + (" grad" if t.requires_grad else "")


def graph_text(name, case, outs):
    inputs = ", ".join("%%%s: %s" % (n, t.ptir()) for n, t in case.inputs.items())
    nout = len(outs) if outs else (2 if case.op in NRETURNS2 else 1)
    names = ", ".join("%%r%d" % i for i in range(nout))
    types = ", ".join(out_type(t) for t in outs) if outs else ", ".join(["f32[]"] * nout)
    return ("graph %s(%s) {\n  # %s\n  %s = %s(%s) : %s\n  return (%s)\n}\n"
            % (name, inputs, case.expr, names, case.op, case.args, types, names))


HEADER = "# ptc ir v1\n# Generated by tests/python/gen_meta_cases.py from torch %s; do not edit.\n"


def file_stem(op):
    return op.replace(".", "_")


def generate(out_dir, src_dir=None):
    """Writes the corpus (replacing the .ptir files there); returns
    (n_valid, n_error, n_skipped)."""
    CASES.clear()
    unary_cases(), binary_cases(), ternary_cases(), reduction_cases(), norm_cases()
    matmul_cases(), conv_cases(), pool_cases(), view_cases(), slice_cases(), index_cases()
    cat_cases(), split_cases(), misc_shape_cases(), creation_cases(), prim_cases()
    promotion_sweep(), dtype_sweep(), pool_sweep(), conv_sweep(), slice_sweep(), size_sweep()
    src_dir = src_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    known = op_names(src_dir)
    counts = {op: 0 for op in known}
    for c in CASES:
        if c.op not in counts:
            raise SystemExit("gen_meta_cases: unknown op %r in a case" % c.op)
        counts[c.op] += 1
    few = [op for op, n in counts.items() if n < MIN_CASES]
    if few:
        raise SystemExit("gen_meta_cases: fewer than %d cases for %s" % (MIN_CASES, ", ".join(few)))
    for d in (out_dir, os.path.join(out_dir, "errors")):
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.endswith(".ptir"):
                os.remove(os.path.join(d, name))
    valid, nerr, skipped = {}, {}, 0
    for c in CASES:
        kind, res = run_case(c)
        if kind == "ok" and c.rejects:
            kind, res = "error", "(torch accepts this; %s)" % c.rejects
        if kind == "skip":
            skipped += 1
        elif kind == "ok":
            graphs = valid.setdefault(c.op, [])
            graphs.append(graph_text("case%d" % len(graphs), c, res))
        else:
            n = nerr.get(c.op, 0)
            nerr[c.op] = n + 1
            path = os.path.join(out_dir, "errors", "%s.%d.ptir" % (file_stem(c.op), n))
            with open(path, "w") as f:
                f.write(HEADER % torch.__version__)
                f.write("# expect: MetaError %s\n# torch: %s\n" % (c.op, res.replace("\n", " ")))
                f.write(graph_text("case", c, None))
    for op, graphs in valid.items():
        with open(os.path.join(out_dir, "%s.ptir" % file_stem(op)), "w") as f:
            f.write(HEADER % torch.__version__)
            f.write("# op: %s (%d cases)\n" % (op, len(graphs)))
            f.write("\n".join(graphs))
    return sum(len(g) for g in valid.values()), sum(nerr.values()), skipped


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "data", "meta")
    v, e, s = generate(out)
    print("gen_meta_cases: %d valid, %d error, %d skipped cases (torch %s) -> %s"
          % (v, e, s, torch.__version__, os.path.normpath(out)))


if __name__ == "__main__":
    main(sys.argv)
