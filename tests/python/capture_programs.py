"""Small torch programs for checking ptc's capture against eager PyTorch.

Each entry of PROGRAMS is a Program: a function (or an nn.Module factory),
a factory of fresh arguments, and the graph and break counts ptc is expected
to report on the first call (graphs counts segments with at least one op;
breaks counts graph breaks, with their codes). test_capture_programs.py runs
each program eagerly and compiled, twice, and compares results, exceptions,
printed text, mutations of the arguments and of module/global state.

Sections: tensor ops, torch.nn.functional, Python features around tensors
(control flow on constants, containers, closures, calls, exceptions, classes,
with-blocks), nn.Modules, graph breaks and their side effects, exceptions.
"""
import collections
import dataclasses
import functools
import math
import operator
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import ptc

PROGRAMS = []

# Global state some programs read or write; reset before each run.
SCALE = 2.0
FLAG = True
COUNTER = 0
LOG = []
STATE = {}
CONFIG = {"act": "relu", "depth": 2}


def reset_state():
    global COUNTER, SCALE, FLAG
    COUNTER = 0
    SCALE = 2.0
    FLAG = True
    LOG.clear()
    STATE.clear()
    ACC.zero_()
    RECORDER.events.clear()


def snapshot_state():
    return {"COUNTER": COUNTER, "SCALE": SCALE, "FLAG": FLAG, "LOG": list(LOG),
            "STATE": dict(STATE)}


def _autocast_api():
    try:
        torch.is_autocast_enabled("cpu")
        return True
    except TypeError:
        return False


HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0
HAVE_AUTOCAST_DEVICE_API = _autocast_api()  # torch >= 2.4


class Program:
    def __init__(self, fn, args, graphs, breaks, codes, module=None, check=None, name=None, recompiles=0,
                 requires=None):
        self.fn = fn
        self.args = args
        self.graphs = graphs
        self.breaks = breaks
        self.codes = tuple(sorted(set(codes)))
        self.module = module
        self.check = check
        self.recompiles = recompiles  # expected on the second call (state it changed)
        self.requires = requires      # (flag, reason): skip unless flag
        self.name = name or (fn.__name__ if fn else module.__name__)

    def __repr__(self):
        return self.name


def prog(args=None, graphs=1, breaks=0, codes=(), check=None, recompiles=0, requires=None):
    """Registers a function program. args: a callable returning a tuple."""
    def deco(fn):
        PROGRAMS.append(Program(fn, args or (lambda: ()), graphs, breaks, codes, check=check,
                                recompiles=recompiles, requires=requires))
        return fn
    return deco


def module_prog(args, graphs=1, breaks=0, codes=(), check=None, recompiles=0):
    """Registers an nn.Module class (built with torch.manual_seed(0))."""
    def deco(cls):
        PROGRAMS.append(Program(None, args, graphs, breaks, codes, module=cls, check=check,
                                name=cls.__name__, recompiles=recompiles))
        return cls
    return deco


def T(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def I(*shape, high=5, seed=0):
    g = torch.Generator().manual_seed(seed + 11)
    return torch.randint(0, high, shape, generator=g)


x34 = lambda: (T(3, 4),)
x34y = lambda: (T(3, 4), T(3, 4, seed=1))

# ---- tensor ops -----------------------------------------------------------------------


@prog(x34y)
def arith(x, y):
    return x * 2 + y - 1, x / (y.abs() + 1), x ** 2, -x, x // 0.7, x % 0.5, 2 - x, 1 / (x.abs() + 1)


@prog(x34)
def unary_math(x):
    return torch.sin(x) + torch.cos(x), x.exp().log1p(), x.tanh(), x.sigmoid(), x.abs().sqrt(), x.rsqrt().nan_to_num(), torch.erf(x)


@prog(x34)
def rounding(x):
    return x.floor(), x.ceil(), x.round(), x.trunc(), x.sign(), torch.round(x * 10, decimals=1)


@prog(x34)
def reductions(x):
    return x.sum(), x.mean(1), x.amax(0), x.amin(dim=1, keepdim=True), x.prod(1), x.sum((0, 1), keepdim=True), torch.mean(x, dim=(0,), dtype=torch.float64)


@prog(x34)
def std_var(x):
    return x.std(), x.var(dim=1, keepdim=True), x.std(0, unbiased=False), torch.var(x, 1, correction=0)


@prog(x34)
def arg_reductions(x):
    return x.argmax(), x.argmax(dim=1), x.argmin(0, keepdim=True), x.max(dim=0), x.min(1).indices, torch.max(x, 1)[0], x.max(), torch.min(x)


@prog(x34)
def logical_reductions(x):
    return (x > 0).any(), (x > 0).all(1), x.logsumexp(1), torch.any(x > 1, dim=0), (x > 0).sum()


@prog(lambda: (T(3, 4), T(4, 5, seed=2)))
def matmuls(x, w):
    return x @ w, torch.mm(x, w), torch.matmul(x[None], w), torch.bmm(x[None], w[None]), x.matmul(w).T


@prog(x34y)
def broadcasting(x, y):
    return x[:, None, :] + y[None, :, :], x + y[0], x * torch.tensor(3.0), x - y[:, :1]


@prog(x34y)
def comparisons(x, y):
    return (x > 0) & (y < 0.5), (x == y) | (x >= 0), x != y, x <= y, ~(x > 0), (x > 0) ^ (y > 0)


@prog(x34y)
def where_clamp(x, y):
    return torch.where(x > 0, x, y), x.clamp(-0.5, 0.5), torch.maximum(x, y), x.clamp(min=0), torch.clamp(x, max=y), torch.minimum(x, y), x.clamp_min(0.1), x.clamp_max(0.2)


@prog(x34)
def masked_fill(x):
    return x.masked_fill(x < 0, 0.0), x.masked_fill(torch.tensor([True, False, True, False]), -1.0), torch.where(x > 0, x, 0.0)


@prog(x34y)
def cat_stack(x, y):
    return torch.cat([x, y], 0), torch.cat((x, y), dim=1), torch.stack([x, y]), torch.stack([x, y], -1), torch.hstack([x, y])


@prog(x34)
def split_chunk(x):
    return x.chunk(2, 1), x.split(2), x.split([1, 3], dim=1), x.unbind(1), torch.split(x, 1), torch.chunk(x, 3)


@prog(x34)
def views(x):
    return x.view(-1), x.reshape(4, 3), x.view(2, 6).contiguous(), x.permute(1, 0), x.transpose(0, 1), x.flatten(), x.unsqueeze(0).squeeze(0), x[None].squeeze(), x.t(), x.T, x.mT


@prog(x34)
def expand_repeat(x):
    return x[:1].expand(3, 4), x.expand(2, 3, 4), x.repeat(2, 1), x[:, :1].expand_as(x), x.unflatten(1, (2, 2)), x.narrow(1, 1, 2), x.select(0, 1), x.movedim(0, 1)


@prog(x34)
def basic_indexing(x):
    return x[0], x[:, 1:3], x[..., -1], x[x.shape[0] - 1], x[None], x[1:, ::2], x[:, None, 1], x[-2:, -1:]


@prog(x34)
def advanced_indexing(x):
    return x[:, [0, 2]], x[torch.tensor([0, 2])], x[[0, 1], [1, 2]], x.index_select(1, torch.tensor([3, 0]))


@prog(x34)
def gather_embedding(x):
    idx = torch.tensor([[0, 1], [2, 3], [1, 1]])
    return x.gather(1, idx), F.embedding(torch.tensor([[0, 2], [1, 1]]), x), torch.gather(x, 0, torch.zeros(2, 4, dtype=torch.long))


@prog(x34)
def setitem_internal(x):
    y = x.clone()
    y[0] = 0
    y[:, 1] = y[:, 2]
    y[1:, :2] = torch.ones(2, 2)
    z = torch.zeros(3, 4)
    z[..., 0] = 5
    return y, z


@prog(x34)
def inplace_internal(x):
    y = x * 1
    y.add_(1)
    y.mul_(2)
    y.relu_()
    y.clamp_(max=1)
    y[:, 1] += 1
    y[0].sub_(3)
    return y


@prog(x34)
def inplace_operators(x):
    y = x + 0
    y += 1
    y *= x
    y -= 2
    y /= 3
    return y


@prog(x34)
def dtype_conversions(x):
    return x.to(torch.float64), x.double().dtype, x.int(), x.half().float(), x.type_as(torch.zeros(1, dtype=torch.float64)), x.long(), x.bool(), x.to(dtype=torch.int32), x.float()


@prog(lambda: (torch.arange(6).reshape(2, 3),))
def type_promotion(i):
    return i + 1.5, i / 2, (i > 2) + 1, i * True, i // 2, i % 4, i.float() + i, i + torch.tensor(2.5, dtype=torch.float64), (i > 1) & (i < 4)


@prog(x34)
def creation(x):
    return torch.zeros(3, 4), torch.ones_like(x), torch.arange(5), torch.full((2, 2), 3.0), torch.zeros(x.shape, dtype=x.dtype), torch.empty(2).shape, x.new_zeros(2), x.new_full((2,), 7), torch.arange(1, 10, 3), torch.arange(0.0, 1.0, 0.25), torch.ones(2, 3, dtype=torch.int64)


@prog(x34)
def factories_decomposed(x):
    return torch.eye(3), torch.eye(2, 4, dtype=torch.int64), torch.linspace(0, 1, 5), torch.linspace(-2.5, 7, 11) * x.sum()


@prog(x34)
def tensor_constants(x):
    return torch.tensor([1.0, 2.0, 3.0, 4.0]) + x, torch.tensor(2) * x, torch.as_tensor([[1, 2, 3, 4]]) * x


@prog(x34)
def softmaxes(x):
    return F.softmax(x, -1), F.log_softmax(x, dim=0), x.softmax(1), torch.softmax(x, 0, dtype=torch.float64), F.softmin(x, 1)


@prog(x34)
def cumulative(x):
    return x.cumsum(1), torch.cumsum(x, 0), x.roll(1, 0), x.tril(), torch.triu(x, 1), x.flip(0), torch.flip(x, [0, 1])


@prog(x34)
def einsums(x):
    # implicit outputs ("ij", "ji", "ij,kj"): the letters used once, sorted
    return (torch.einsum("ij,kj->ik", x, x), torch.einsum("ij->j", x), torch.einsum("bi,bi->b", x, x),
            torch.einsum("ij", x), torch.einsum("ji", x), torch.einsum("ij,kj", x, x))


@prog(x34)
def norms(x):
    return x.norm(dim=1), F.normalize(x, dim=1), torch.linalg.vector_norm(x, dim=0), x.norm(), torch.norm(x, p=1, dim=0)


@prog(x34)
def activations(x):
    return F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.elu(x), F.leaky_relu(x, 0.1), F.hardswish(x), F.softplus(x), F.mish(x), F.relu6(x), F.hardsigmoid(x), F.logsigmoid(x), F.hardtanh(x), torch.relu(x), F.glu(x)


@prog(x34)
def normalizations(x):
    return F.layer_norm(x, (4,)), F.group_norm(x[None], 1), F.batch_norm(x, torch.zeros(4), torch.ones(4), training=False), F.layer_norm(x, (4,), torch.ones(4) * 2, torch.zeros(4) + 1)


@prog(lambda: (T(2, 3, 8, 8),))
def convs_pools(x):
    w = torch.ones(4, 3, 3, 3) / 27
    return F.conv2d(x, w, padding=1), F.max_pool2d(x, 2), F.avg_pool2d(x, (2, 2)), F.adaptive_avg_pool2d(x, 1), F.conv2d(x, w, stride=2, bias=torch.ones(4)), F.max_pool2d(x, 3, stride=2, padding=1)


@prog(lambda: (T(2, 3, 10),))
def conv1d(x):
    return F.conv1d(x, torch.ones(4, 3, 3) / 9), F.conv1d(x, torch.ones(3, 1, 3), groups=3, padding="same"), F.adaptive_avg_pool1d(x, 2)


@prog(x34)
def linear_fn(x):
    return F.linear(x, torch.ones(5, 4), torch.ones(5)), F.linear(x, torch.eye(4)), torch.addmm(torch.ones(3), x[:, :3], torch.ones(3, 3))


@prog(lambda: (T(2, 4, 6, 8),), requires=(HAVE_SDPA, "torch < 2.0 has no scaled_dot_product_attention"))
def attention(x):
    q, k, v = x, x * 0.5, x + 1
    return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True)


@prog(lambda: (T(2, 5, 8), T(24, 8, seed=1), T(24, seed=2), T(8, 8, seed=3), T(8, seed=4)),
      requires=(hasattr(torch, "_native_multi_head_attention"), "torch has no _native_multi_head_attention"))
def native_mha(x, w, b, pw, pb):
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    out, weights = torch._native_multi_head_attention(x, x, x, 8, 2, w, b, pw, pb, mask, True, True, 1)
    out2, none = torch._native_multi_head_attention(x, x, x, 8, 4, w, b, pw, pb, None, False)
    return out, weights, out2, none


@prog(x34)
def padding(x):
    return F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), value=3.0), F.pad(x[None], (0, 0, 1, 1))


@prog(x34)
def pointwise_decomposed(x):
    y = x.abs() + 0.5
    return torch.hypot(x, y), torch.lerp(x, y, 0.3), x.lerp(y, 0.8), torch.addcmul(x, x, y, value=0.5), x.addcdiv(x, y), torch.exp2(x), y.log2(), torch.log10(y), torch.xlogy(y, y)


@prog(x34)
def finiteness(x):
    z = x / (x > 0).float()
    return torch.isinf(z), torch.isfinite(z), torch.nan_to_num(z, posinf=9.0), torch.isclose(x, x + 1e-9), z.isnan()


@prog(x34)
def shape_decomposed(x):
    return x.repeat_interleave(2, dim=0), x.tile((2, 1)), torch.broadcast_to(x[0], (2, 4)), torch.broadcast_tensors(x, x[0]), x.diff(), torch.diff(x, dim=0), x.fliplr(), torch.dot(x[0], x[1])


@prog(x34y)
def losses(x, y):
    t = torch.tensor([0, 3, 1])
    return (F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum"), F.smooth_l1_loss(x, y), F.huber_loss(x, y, delta=0.5),
            F.cross_entropy(x, t), F.cross_entropy(x, torch.softmax(y, 1)), F.nll_loss(F.log_softmax(x, 1), t, reduction="none"),
            F.binary_cross_entropy_with_logits(x, (y > 0).float()), F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y)))


@prog(x34)
def dropout_eval(x):
    return F.dropout(x, 0.5, training=False), F.dropout(x, p=0.0), F.dropout2d(x[None, None], 0.3, training=False)


def _check_random(eager, compiled):
    """Random ops: same shapes and dtypes; dropout keeps 0 or x / (1 - p)."""
    (r1, d1, x1), (r2, d2, x2) = eager, compiled
    assert r1.shape == r2.shape and r1.dtype == r2.dtype
    assert ((r2 >= 0) & (r2 < 1)).all()
    kept = d2 != 0
    assert torch.allclose(d2[kept], x2[kept] * 2)
    assert 0 < kept.float().mean() < 1


@prog(lambda: (T(64, 64),), check=_check_random)
def random_ops(x):
    return torch.rand(3, 5), F.dropout(x, 0.5, training=True), x


@prog(x34)
def tensor_methods_misc(x):
    return x.abs(), x.neg(), x.reciprocal(), x.pow(2), x.square(), x.exp(), x.sum(-1).unsqueeze(-1) - x, x.mean(), x.clone().detach(), x.detach()


# ---- shapes and metadata as constants ---------------------------------------------------


@prog(x34)
def shape_queries(x):
    b, c = x.shape
    return x.reshape(c, b), x.size(), x.size(1), x.dim(), x.numel(), len(x), x.ndim, tuple(x.shape) + (1,), x.shape[1:], x.size()[-1] * 2


@prog(x34)
def shape_arith(x):
    n = x.shape[0] * x.shape[1]
    half = x.shape[1] // 2
    return x.view(n), x[:, :half], x.new_zeros(x.shape[0], half), torch.zeros(x.size(0) + 1), float(x.shape[0]) / 2


@prog(x34, graphs=0)
def metadata(x):
    return x.dtype, x.device, x.is_floating_point(), x.requires_grad, x.dtype == torch.float32, x.is_contiguous(), str(x.dtype), x.element_size(), torch.is_tensor(x), isinstance(x, torch.Tensor)


@prog(lambda: (T(3, 4), T(2, 2, seed=3)))
def branch_on_shape(x, y):
    if x.shape[0] > 2:
        x = x * 2
    else:
        x = x - 1
    if y.dim() == 2 and y.shape == (2, 2):
        y = y.T
    return x, y


@prog(lambda: (T(3, 4), T(3, 4, dtype=torch.float64)))
def branch_on_dtype(x, y):
    out = []
    for t in (x, y):
        if t.dtype == torch.float64:
            out.append(t.float())
        elif t.is_floating_point():
            out.append(t * 2)
    return out


# ---- Python around tensors ----------------------------------------------------------------


@prog(x34)
def python_loops(x):
    for i in range(3):
        x = x * 2 + i
    i = 0
    while i < 2:
        x = x - 1
        i += 1
    return x


@prog(x34)
def list_comprehension(x):
    parts = [x * i for i in range(3)]
    return torch.stack(parts), [p.sum() for p in parts if p is not parts[0]]


@prog(x34)
def dict_comprehension(x):
    d = {f"k{i}": x[i] for i in range(x.shape[0])}
    return {k: v * 2 for k, v in d.items()}, sorted(d)


@prog(x34)
def generator_expressions(x):
    return sum(x * i for i in range(3)), tuple(s * 2 for s in x.shape), all(s > 1 for s in x.shape), max(t.shape[0] for t in (x, x[:2]))


@prog(x34)
def closure_use(x):
    scale = x.shape[1]

    def inner(t):
        return t * scale + x

    return inner(x), inner(x * 2)


@prog(x34)
def nonlocal_counter(x):
    count = 0

    def step(t):
        nonlocal count
        count += 1
        return t + count

    y = step(step(x))
    return y, count


@prog(x34)
def lambdas_partial(x):
    f = lambda t, k=2: t * k
    g = functools.partial(torch.add, alpha=2)
    return f(x), f(x, k=3), g(x, x), list(map(lambda t: t + 1, [x, x]))


@prog(x34)
def star_args(x):
    def total(*ts, scale=1.0, **kw):
        out = sum(ts) * scale
        for k in sorted(kw):
            out = out + kw[k]
        return out

    args = [x, x * 2]
    kwargs = {"bias": x.mean(), "shift": 1}
    return total(*args), total(x, scale=0.5), total(*args, **kwargs)


@prog(x34)
def keyword_calls(x):
    return F.softmax(input=x, dim=-1), torch.sum(x, dim=1, keepdim=True), x.reshape(shape=(4, 3)), torch.cat(tensors=[x, x], dim=0), x.transpose(dim0=0, dim1=1)


@prog(x34, graphs=0)
def fstring_shapes(x):
    name = f"{x.shape[0]}x{x.shape[1]}:{x.dtype}"
    return x, name, "%d-%s" % (x.dim(), "d"), "{}/{}".format(*x.shape)


@prog(x34)
def unpacking(x):
    a, b, *rest = x.unbind(0)
    first, *_ = x.split(1, dim=1)
    (p, q), r = (x[0], x[1]), x[2]
    return a + b + rest[0], first, p * q - r


@prog(x34)
def tuple_dict_returns(x):
    return {"sum": x.sum(), "parts": (x[0], [x[1], x[2]]), "n": 3}


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: torch.Tensor = None
    extra: dict = dataclasses.field(default_factory=dict)


@prog(x34)
def namedtuple_output(x):
    p = Pair(x[0], x[1])
    return p, p.left + p.right, p._replace(left=x[2])


@prog(x34)
def dataclass_output(x):
    o = Output(x * 2)
    o.loss = o.logits.sum()
    o.extra["mean"] = x.mean()
    return o


@prog(x34)
def ordered_dict_output(x):
    d = collections.OrderedDict()
    d["a"] = x
    d["b"] = x + 1
    return d, list(d.values())[1]


@prog(x34)
def enumerate_zip(x):
    out = []
    for i, (a, b) in enumerate(zip(x, x.flip(0))):
        out.append(a * i + b)
    return torch.stack(out), list(reversed(range(3)))


@prog(x34)
def python_builtins(x):
    n = min(x.shape)
    m = max(x.shape[0], 2)
    s = sorted([3, 1, 2])
    return x[:n] * m, s, abs(-3), round(2.567, 1), divmod(7, 2), int("3") * x.sum(), math.sqrt(x.shape[1]), isinstance(x, (list, torch.Tensor)), len([x, x])


@prog(x34)
def math_module(x):
    scale = math.sqrt(x.shape[-1])
    return x / scale, x * math.pi, math.floor(2.5), math.log(8, 2) * x


@prog(x34)
def operator_module(x):
    return operator.add(x, 1), operator.mul(x, x), operator.getitem(x, 0), functools.reduce(operator.add, [x, x, x])


@prog(x34)
def global_constants(x):
    return x * SCALE, CONFIG["depth"] * x, x if FLAG else -x


@prog(x34)
def conditional_expressions(x):
    a = x if x.shape[0] > 1 else x * 0
    b = (x + 1) if CONFIG["act"] == "relu" else x
    return a, b, (x > 0) if a is not None else None


@prog(x34)
def walrus_and_chains(x):
    if (n := x.shape[0]) > 1:
        x = x * n
    return x, 0 < n < 10, n == 3 != 4


@prog(x34)
def match_statement(x):
    match x.shape:
        case (3, c):
            y = x * c
        case _:
            y = x
    match CONFIG:
        case {"act": "relu"}:
            y = y.relu()
    return y


@prog(x34)
def try_except_no_error(x):
    try:
        y = x * 2
    except ValueError:
        y = x
    finally:
        z = x + 1
    return y, z


@prog(x34)
def try_except_python_error(x):
    d = {"a": x}
    try:
        y = d["b"]
    except KeyError as e:
        y = x * 3
        msg = str(e)
    return y, msg


@prog(x34)
def try_finally_return(x):
    try:
        return x * 2
    finally:
        x = x + 100


@prog(x34)
def nested_try(x):
    out = []
    for i in range(3):
        try:
            if i == 1:
                raise ValueError("one")
            out.append(x * i)
        except ValueError:
            out.append(x - 1)
        else:
            out.append(x + i)
    return out


@prog(x34)
def assert_on_shapes(x):
    assert x.dim() == 2, "need a matrix"
    assert x.shape[1] == 4
    return x * 2


@prog(lambda: (T(3, 4).requires_grad_(),))
def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    z = x * 3
    return y.requires_grad, z.requires_grad, y.detach(), z.detach()


@prog(lambda: (T(3, 4).requires_grad_(),))
def grad_mode_blocks(x):
    with torch.no_grad():
        with torch.enable_grad():
            a = x * 2
        b = x * 3
    with torch.set_grad_enabled(False):
        c = x + 1
    return a.requires_grad, b.requires_grad, c.requires_grad, torch.is_grad_enabled(), (a + b + c).detach()


@prog(x34)
def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2
    return y


@prog(lambda: (T(4, 8), T(8, 8, seed=1)),
      requires=(HAVE_AUTOCAST_DEVICE_API, "torch < 2.4: is_autocast_enabled takes no device"))
def autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = F.linear(y, w).relu()
        inside = torch.is_autocast_enabled("cpu")
    return y, z, y.dtype, inside, (x @ w).dtype


@prog(x34)
def nullcontext_block(x):
    import contextlib
    with contextlib.nullcontext(x) as t:
        y = t * 2
    return y


class Helper:
    scale = 3

    def __init__(self, k):
        self.k = k

    def apply(self, t):
        return t * self.k + self.scale

    @staticmethod
    def twice(t):
        return t * 2

    @classmethod
    def make(cls, k):
        return cls(k)

    @property
    def double_k(self):
        return self.k * 2


@prog(x34)
def class_instances(x):
    h = Helper.make(2)
    return h.apply(x), Helper.twice(x), h.double_k * x, Helper.scale, type(h).__name__


class Base:
    def f(self, t):
        return t + 1


class Derived(Base):
    def f(self, t):
        return super().f(t) * 2


@prog(x34)
def super_calls(x):
    return Derived().f(x), isinstance(Derived(), Base)


@prog(x34)
def getattr_hasattr(x):
    h = Helper(3)
    return getattr(h, "k") * x, getattr(h, "missing", 5), hasattr(h, "apply"), getattr(x, "relu")()


@prog(x34)
def recursion(x):
    def power(t, n):
        return t if n == 1 else t * power(t, n - 1)

    return power(x, 4)


@prog(x34, graphs=0)
def string_ops(x):
    names = ["conv", "bn", "relu"]
    key = "-".join(n.upper() for n in names)
    return x, key, key.lower().split("-"), "relu" in names, names.index("bn")


@prog(x34)
def torch_functions_as_values(x):
    ops = [torch.relu, torch.tanh, F.gelu]
    for op in ops:
        x = op(x)
    table = {"a": torch.sigmoid}
    return table["a"](x)


@prog(x34)
def sets_and_frozensets(x):
    dims = {0, 1}
    return x.sum(tuple(sorted(dims))), frozenset([1, 2]) | {3}, 1 in dims


@prog(lambda: ([T(2, 2), T(2, 2, seed=1)], {"w": T(2, 2, seed=2)}))
def container_inputs(ts, d):
    return ts[0] @ d["w"] + ts[1], len(ts), list(d)


@prog(lambda: (T(3, 4), None, 3, "mean"))
def mixed_inputs(x, mask, k, mode):
    if mask is not None:
        x = x * mask
    y = x[:, :k]
    return y.mean() if mode == "mean" else y.sum()


@prog(lambda: (T(3, 4),))
def slices_and_ellipsis(x):
    s = slice(1, None)
    return x[s], x[..., s], x[(slice(None), 0)]


@prog(lambda: (T(2, 3, 4),))
def iterate_tensor(x):
    return [row.sum() for row in x], torch.stack([r * i for i, r in enumerate(x)])


@prog(x34)
def chained_methods(x):
    return x.t().contiguous().view(-1).relu().add(1).mul_(2).sum(0)


@prog(x34)
def int_float_from_shapes(x):
    return x * float(x.shape[0]), x + int(x.numel() / 2), x * bool(x.shape[0])


@prog(x34)
def detach_and_clone(x):
    y = x.clone()
    z = y.detach()
    return y + z, z.requires_grad


@prog(x34)
def torch_size_ops(x):
    s = x.shape
    return torch.Size([2, 6]), s == torch.Size([3, 4]), s.numel(), list(s), x.view(torch.Size([12])), x.new_ones(s)


@prog(x34)
def isinstance_checks(x):
    out = []
    for v in (x, 1, 2.0, "s", None, [x]):
        if isinstance(v, torch.Tensor):
            out.append(v * 2)
        elif isinstance(v, (int, float)):
            out.append(v + 1)
        else:
            out.append(type(v).__name__)
    return out


@prog(x34)
def deep_inlining(x):
    def a(t):
        return b(t) + 1

    def b(t):
        return c(t) * 2

    def c(t):
        return t.relu()

    return a(x)


@prog(x34)
def default_mutable_free(x):
    def add_all(t, extra=(1, 2)):
        for e in extra:
            t = t + e
        return t

    return add_all(x), add_all(x, extra=[5])


# Issue 13's surface: each of these broke the graph on main.
ROW = operator.itemgetter(1)


class Holder:
    def __init__(self, t):
        self.t = t
        self.n = 1

    def __eq__(self, other):  # the harness compares arguments after the call
        return type(other) is Holder and self.n == other.n and torch.equal(self.t, other.t)


@prog(x34)
def operator_getters(x):
    first, last = operator.itemgetter(0, -1)(x)
    shape = operator.attrgetter("shape")(x)
    return ROW(x) + first * last, shape, operator.methodcaller("sum", dim=0)(x)


@prog(x34)
def builtin_max_of_scalar_tensors(x):
    a, b = x[0, 0], x[1, 1]
    return max(a, b) * x, min(a, b, x[2, 2])


@prog(x34)
def torch_tensor_of_traced(x):
    y = torch.tensor(x * 2, dtype=torch.float64)
    return y + 1, torch.as_tensor(x) * 3


@prog(lambda: ([T(3), T(2, 2, seed=1)],))
def foreach_ops(ts):
    a = torch._foreach_mul(ts, 2.0)
    torch._foreach_add_(a, ts, alpha=0.5)
    torch._foreach_addcmul_(a, ts, ts, 0.1)
    return torch._foreach_sqrt(torch._foreach_abs(a)), torch._foreach_norm(a)


@prog(lambda: (T(3, 4), T(4), torch.tensor(0.25)))
def addcmul_tensor_value(x, w, v):
    y = x.clone()
    y.addcmul_(x, w, value=v)
    return torch.addcdiv(y, x, w.abs() + 1, value=v * 2).lerp(x, v)


@prog(lambda: (T(3, 4), [T(2), T(4, seed=1), T(3, seed=2)]))
def sort_outside_list_by_size(x, ts):
    ts.sort(key=lambda t: t.numel())
    return x[:, : ts[0].numel()] * ts[0], [t.numel() for t in ts]


@prog(x34)
def namedtuple_inside(x):
    Pt = collections.namedtuple("Pt", ["lo", "hi"])
    p = Pt(x.min(dim=1).values, x.max(dim=1).values)
    return p.hi - p.lo, tuple(p._replace(lo=p.lo * 0))


@prog(lambda: (T(3, 4), Holder(T(4))))
def instance_dict_write_then_read(x, h):
    h.__dict__["t"] = h.t * 2
    h.__dict__["n"] = 3
    return x * h.t + h.n


# ---- nn.Modules ---------------------------------------------------------------------------


@module_prog(lambda: (T(2, 8),))
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Tanh())

    def forward(self, x):
        return self.net(x)


@module_prog(lambda: (T(2, 8),))
class ModuleListLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + x if i % 2 == 0 else layer(x)
        return x, len(self.layers), self.layers[-1](x)


@module_prog(lambda: (T(2, 8),))
class ModuleDictRouting(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})

    def forward(self, x):
        return {k: h(x) for k, h in self.heads.items()}, self.heads["a"](x), list(self.heads.keys())


@module_prog(lambda: (T(2, 3, 8, 8),))
class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)
        self.eval()

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


@module_prog(lambda: (T(2, 8),))
class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.scale = 0.5

    def forward(self, x):
        return self.norm(x + self.scale * self.fc2(F.gelu(self.fc1(x))))


@module_prog(lambda: (T(2, 8),))
class ParamsAndBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("offset", torch.arange(8.0))
        self.register_buffer("unused", torch.zeros(1))

    def forward(self, x):
        return x @ self.weight + self.offset, self.weight.shape, sum(p.numel() for p in self.parameters())


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return F.relu(self.fc(x))


class BlockWithSuper(Block):
    def forward(self, x):
        return super().forward(x) * 2


@module_prog(lambda: (T(2, 8),))
class InheritedModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block(8)
        self.b = BlockWithSuper(8)

    def forward(self, x):
        return self.b(self.a(x))


@module_prog(lambda: (T(2, 5, 16),))
class TransformerLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.eval()

    def forward(self, x):
        return self.layer(x)


@module_prog(lambda: (T(2, 5, 16),))
class MultiheadAttn(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.eval()

    def forward(self, x):
        out, w = self.attn(x, x, x, need_weights=True)
        return out, w


@module_prog(lambda: (I(2, 6, high=20),))
class EmbeddingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, 6, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, ids):
        return self.head(self.emb(ids) + self.pos).mean(1)


@module_prog(lambda: (T(2, 8),))
class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.eval()

    def forward(self, x):
        y = self.drop(self.fc(x))
        if self.training:
            y = y * 0
        return y


@module_prog(lambda: (T(2, 8),))
class ConfigAttrs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = "gelu"
        self.use_bias_shift = True
        self.cfg = {"eps": 1e-5, "layers": [1, 2]}

    def forward(self, x):
        y = self.fc(x)
        y = F.gelu(y) if self.act == "gelu" else F.relu(y)
        if self.use_bias_shift:
            y = y + self.cfg["eps"] * len(self.cfg["layers"])
        return y


@module_prog(lambda: (T(2, 8),))
class ForwardHooks(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fc.register_forward_hook(lambda m, inp, out: out * 2)
        self.fc.register_forward_pre_hook(lambda m, inp: (inp[0] + 1,))

    def forward(self, x):
        return self.fc(x).relu()


@module_prog(lambda: (T(2, 4, 6, 6),))
class GroupNormDepthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.gn = nn.GroupNorm(2, 4)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.gn(self.dw(x))) + x


@module_prog(lambda: (T(2, 8),))
class SequentialSlicing(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Sigmoid())

    def forward(self, x):
        return self.seq[:2](x), self.seq[-1](x), len(self.seq)


@module_prog(lambda: (T(2, 8),))
class NamedModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        for name, m in self.named_children():
            x = m(x) if name != "b" else m(x).tanh()
        return x, [n for n, _ in self.named_parameters()]


@module_prog(lambda: (T(2, 3, 8, 8),))
class Upsampling(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


@module_prog(lambda: (T(2, 8),))
class IdentityAndFlatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.id = nn.Identity()
        self.flat = nn.Flatten()
        self.unflat = nn.Unflatten(1, (2, 4))

    def forward(self, x):
        return self.flat(self.unflat(self.id(x))), self.unflat(x).shape


@module_prog(lambda: (T(2, 8),), recompiles=1)  # the second call finds .act there
class GrowsItsSequential(nn.Module):
    # add_module on a submodule is a logged write: calling and iterating the
    # Sequential in the same graph see the new child (main: they did not)
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(8, 8))

    def forward(self, x):
        self.seq.add_module("act", nn.Tanh())
        return self.seq(x), [type(m).__name__ for m in self.seq], self.seq.act(x)


class Slots:
    """A container whose Python __setitem__ writes its own dict."""

    def __init__(self):
        self.items = {}

    def __setitem__(self, k, v):
        self.items[k] = v


SLOTS = Slots()


@prog(x34)
def python_setitem_of_an_outside_object(x):
    SLOTS["y"] = x * 2  # traced into: the write to SLOTS.items is replayed
    return SLOTS.items["y"] + 1, len(SLOTS.items)


@prog(x34, graphs=2, breaks=1, codes=["PTC-B002"])
def closure_over_a_number_from_a_break(x):
    n = int(x.sum() > 0)
    scale = lambda: n + 1  # noqa: E731
    return x * scale()


# ---- graph breaks and side effects -------------------------------------------------------


@prog(x34, graphs=2, breaks=1, codes=["PTC-B005"])
def print_break(x):
    y = x * 2
    print("shape", tuple(y.shape), "dtype", y.dtype)
    return y + 1


@prog(x34, graphs=2, breaks=1, codes=["PTC-B002"])
def item_break(x):
    s = x.sum()
    v = s.item()
    return x * v


@prog(x34, graphs=2, breaks=1, codes=["PTC-B001"])
def tensor_branch(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


@prog(lambda: (T(3, 4), []), graphs=1, breaks=0, codes=[])
def append_to_input_list(x, out):
    y = x + 1
    out.append(y.shape[0])
    return y * 2, out


@prog(x34, graphs=1, breaks=0, codes=[], recompiles=1)
def append_to_global_list(x):
    y = x.relu()
    LOG.append("called")
    return y + len(LOG)


@prog(x34, graphs=1, breaks=0, codes=[], recompiles=1)
def global_write(x):
    global COUNTER
    y = x * 2
    COUNTER += 1
    return y + COUNTER


@prog(x34, graphs=1, breaks=0, codes=[])
def dict_write_outside(x):
    y = x.sum(0)
    STATE["last"] = tuple(y.shape)
    return y * 2


@prog(x34, graphs=1, breaks=1, codes=["PTC-B003"])
def tolist_break(x):
    return x.sum(1).tolist()


@prog(x34, graphs=2, breaks=1, codes=["PTC-B008"])
def nonzero_break(x):
    idx = torch.nonzero(x > 0)
    return idx * 2


@prog(x34, graphs=2, breaks=1, codes=["PTC-B008"])
def boolean_mask_break(x):
    y = x * 2
    return y[y > 0].sum()


@prog(x34, graphs=1, breaks=0)
def inplace_on_input(x):
    y = x * 2
    x.add_(1)
    return x + y


@prog(x34, graphs=1, breaks=0)
def inplace_through_views_of_input(x):
    x[0].add_(1)
    x[:, 1] = 0
    x[1:].mul_(2)
    return x.sum()


@prog(x34, graphs=1, breaks=0)
def inplace_through_transpose_of_input(x):
    y = x * 2
    x.t().add_(1)
    return x + y


ACC = torch.zeros(3, 4)


def _accumulate(x, acc=ACC):
    acc.add_(x)
    return acc * 2


@prog(x34, graphs=1, breaks=0)
def inplace_on_default_argument(x):
    # the write persists in _accumulate.__defaults__ (reset per run)
    return _accumulate(x), _accumulate(x * 2)


@prog(x34, graphs=1, breaks=0)
def inplace_through_permute_views(x):
    y = x.permute(1, 0)
    x.mul_(2)  # y follows
    y[0].add_(1)  # and x follows y
    return x + y.t()


@functools.lru_cache
def _lru_doubled(n):
    return n * 2


@functools.cache
def _cached_pair(n, m=2):
    return (n, m)


@functools.cache
def _cached_shift(t):
    return t.relu() + 1


@prog(x34, graphs=1, breaks=0)
def lru_cache_of_constants(x):
    # called for real while tracing: its result is the cached object
    return x * _lru_doubled(3) + _cached_pair(2, m=1)[1]


@prog(x34, graphs=1, breaks=0)
def lru_cache_of_a_tensor_made_here(x):
    # a new key on every eager call: traced into
    return _cached_shift(x * 2)


class _DoublingList(list):
    def append(self, v):
        super().append(v * 2)


@prog(x34, graphs=1, breaks=0)
def list_subclass_with_own_append_returned(x):
    items = _DoublingList([1])
    items.append(x)
    return items


@prog(x34, graphs=1, breaks=0)
def list_indexed_by_a_constant_tensor(x):
    items = [x, x * 2, x * 3]
    return items[torch.tensor(1)] + items[torch.tensor(-1)]


@module_prog(x34)
class WritesTensorAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.seen = torch.zeros(3, 4)  # a plain tensor attribute

    def forward(self, x):
        self.calls.add_(1)
        self.seen.add_(x)
        return x * self.calls + self.seen


class Made:
    pass


def _id_matches(eager, compiled):
    for r in (eager, compiled):
        assert r[2] == id(r[1]) and r[3] == {id(r[1]): True}, r


@prog(x34, graphs=1, breaks=0, check=_id_matches)
def id_of_made_object_leaves_the_call(x):
    o = Made()
    return x + 1, o, id(o), {id(o): id(o) in {id(o): o}}


@prog(x34, graphs=1, breaks=1, codes=["PTC-B013"])
def raise_value_error(x):
    y = x * 2
    if y.shape[0] == 3:
        raise ValueError("three rows")
    return y


@ptc.disable
def _disabled_helper(t):
    return t * 10


@prog(x34, graphs=2, breaks=1, codes=["PTC-B014"])
def call_disabled(x):
    y = x + 1
    z = _disabled_helper(y)
    return z - 1


def _gen_fn(n):
    for i in range(n):
        yield i


@prog(x34, graphs=1, breaks=0)  # traced lazily, as torch.compile inlines it
def user_generator(x):
    total = sum(_gen_fn(3))
    return x * total


def _gen_fn_closing(n):
    try:
        for i in range(n):
            yield i
    finally:
        pass


# A try block in a generator run to its end: traced, finally included (torch.compile: 1 graph).
@prog(x34)
def user_generator_with_finally(x):
    total = sum(_gen_fn_closing(3))
    return x * total


class _Recorder:
    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


RECORDER = _Recorder()


@prog(x34, recompiles=1)  # __enter__, __exit__ in Python are traced (torch.compile: 1 graph);
# the events list it returns grew, so the second call recompiles on its length
def custom_context_manager(x):
    y = x * 2
    with RECORDER:
        y = y + 1
    return y * 3, list(RECORDER.events)


@prog(x34, graphs=2, breaks=1, codes=["PTC-B007"])
def unsupported_torch_op(x):
    y = x * 2
    s = torch.logcumsumexp(y, dim=1)
    return s + 1


@prog(x34, graphs=2, breaks=1, codes=["PTC-B024"])
def tensor_attr_write(x):
    y = x * 2
    y.requires_grad = True
    return (y + 1).requires_grad, (y + 1).detach()


@prog(x34, graphs=1, breaks=1, codes=["PTC-B004"])
def tensor_str_break(x):
    y = x.sum(0)
    return "value: " + str(y)


@prog(x34, graphs=2, breaks=1, codes=["PTC-B005"])
def break_in_inlined_function(x):
    def helper(t):
        t = t * 2
        print("inside helper", t.shape)
        return t + 1

    return helper(x) * 3


@prog(x34, graphs=3, breaks=2, codes=["PTC-B005"])
def break_in_loop(x):
    for i in range(2):
        x = x + i
        print("step", i)
    return x * 2


@prog(x34, graphs=1, breaks=1, codes=["PTC-B005"])
def break_in_generator_expression(x):
    return sum(print("item", i) or x * i for i in range(3)) + 1


@prog(x34, graphs=2, breaks=1, codes=["PTC-B005"])
def break_with_live_locals(x):
    a = x * 2
    b = [a, x]
    d = {"k": a + 1}
    print("mid")
    return b[0] + d["k"] + b[1]


@prog(x34, graphs=2, breaks=1, codes=["PTC-B005"])
def break_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("in no_grad")
        z = y + 1
    return z, torch.is_grad_enabled()


@prog(lambda: (T(3, 4), []), graphs=1, breaks=0, codes=[])
def side_effect_order(x, log):
    log.append("a")
    y = x * 2
    log.append(tuple(y.shape))
    z = y.sum()
    log.append("c")
    return z


@module_prog(lambda: (T(2, 8),), recompiles=1)
class ModuleAttrWrite(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        y = self.fc(x)
        self.calls += 1
        return y * self.calls


@module_prog(lambda: (T(2, 8),), graphs=1, breaks=0)
class BufferUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x):
        y = x * 2
        self.steps.add_(1)
        return y + self.steps


@module_prog(lambda: (T(2, 8),), graphs=2, breaks=1, codes=["PTC-B005"])
class BreakInSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _PrintingLinear()
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.inner(x))


class _PrintingLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        print("inner module", y.shape)
        return y.relu()


@prog(x34, graphs=2, breaks=1, codes=["PTC-B001"])
def tensor_while(x):
    n = 0
    while (x.abs().max() > 0.5) and n < 3:
        x = x * 0.1
        n += 1
        break
    return x, n


@prog(x34, graphs=2, breaks=1, codes=["PTC-B002"])
def int_of_tensor(x):
    k = int(x.argmax())
    return x.flatten()[k] * 2 + x.sum()


@prog(x34, graphs=2, breaks=1, codes=["PTC-B001"])
def assert_on_tensor(x):
    y = x.abs()
    assert (y >= 0).all(), "negative"
    return y * 2


@prog(lambda: (T(3, 4), T(3, 4, seed=4)), graphs=3, breaks=3, codes=["PTC-B001"])
def data_dependent_loop(x, y):
    i = 0
    while (x - y).abs().sum() > 1 and i < 2:
        x = (x + y) / 2
        i += 1
    return x


# ---- exceptions raised as in eager ----------------------------------------------------


@prog(x34, graphs=1, breaks=1, codes=["PTC-B022"])
def shape_mismatch(x):
    y = x * 2
    return y + torch.ones(5)


@prog(x34, graphs=0, breaks=1, codes=["PTC-B022"])
def matmul_mismatch(x):
    return x @ x


@prog(x34, graphs=0, breaks=1, codes=["PTC-B013"])
def key_error(x):
    return {"a": x}["b"]


@prog(x34, graphs=1, breaks=1, codes=["PTC-B013"])
def index_error(x):
    y = x * 2
    return [y][3]


@prog(x34, graphs=0, breaks=1, codes=["PTC-B013"])
def type_error_call(x):
    def f(a, b):
        return a + b
    return f(x)


@prog(x34, graphs=1, breaks=1, codes=["PTC-B013"])
def custom_exception(x):
    class MyError(Exception):
        pass
    y = x + 1
    if y.dim() == 2:
        raise MyError("custom %d" % y.dim())
    return y


@prog(x34, graphs=1, breaks=0)
def exception_caught_inside(x):
    try:
        raise RuntimeError("inner")
    except RuntimeError as e:
        return x * len(str(e))


@prog(x34, graphs=0, breaks=1, codes=["PTC-B022"])
def bad_view(x):
    return x.view(5, 5)


@prog(x34, graphs=0, breaks=1, codes=["PTC-B022"])
def dim_out_of_range(x):
    return x.sum(dim=3)


# ---- no tensor work ------------------------------------------------------------------------


@prog(lambda: (3, [1, 2]), graphs=0)
def python_only(n, items):
    return [i * n for i in items] + [sum(items)], {"n": n}


@prog(x34, graphs=0)
def returns_input(x):
    return x


@prog(x34, graphs=0)
def returns_metadata_only(x):
    return x.shape, x.dtype, x.dim()
