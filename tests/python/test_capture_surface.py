"""Python and torch surface that traces into one graph (issue 13 part 3).

Each program runs eagerly and under ptc.compile(backend="eager") twice:
results (values, types), exceptions and warnings must agree, with no ptc
warning, and the first call must give the pinned graph and break counts.
"""
import collections
import functools
import itertools
import operator
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402

CASES = []


def case(graphs, breaks):
    def add(fn):
        CASES.append(pytest.param(fn, graphs, breaks, id=fn.__name__))
        return fn
    return add


@case(1, 0)
def dict_fromkeys(x):
    # main: an internal error ("a fresh entry rejects its own state": the
    # class method is bound afresh on each read), then eager
    d = dict.fromkeys(["a", "b"], 1)
    e = dict.fromkeys("xy")
    return d["a"] + x, sorted(d), e


@case(1, 0)
def chain_from_iterable(x):
    return sum(itertools.chain.from_iterable([[x, x * 2], [x * 3]])), list(
        itertools.chain.from_iterable(["ab", "c"]))


@case(1, 0)
def partial_with_tensor_arguments(x):
    add = functools.partial(torch.add, alpha=2)
    mul = functools.partial(torch.mul, x)
    return add(x, x), mul(3)


@case(1, 0)
def default_dtype_and_grad_mode(x):
    # main: torch.get_default_dtype broke (B007) though it is a pure query
    y = x.to(torch.get_default_dtype()) + 1
    return y * 2 if torch.is_grad_enabled() else y


@case(1, 0)
def torch_function_mode_query(x):
    # main: a break (PTC-B007; torch.compile: one graph). False in every
    # trace: a call made while a mode is active runs eagerly
    return x - 1 if torch._C._is_torch_function_mode_enabled() else x + 1


@case(1, 0)
def tensor_new_of_sizes(x):
    # main: Tensor.new broke (B007), then the in-place zero_ on it (B012)
    a = x.new(2, 3).zero_()
    b = x.new(torch.Size([3])).fill_(2.0)
    return a + x, b


@case(1, 0)
def tensor_type_of_a_dtype(x):
    # main: Tensor.type broke (B007)
    return x.type(torch.float64) * 2, x.type(dtype=torch.int32)


@case(1, 0)
def tensor_new_of_data(x):
    # main: a break (B003) at each (torch.compile: one graph); and x.new((3, 1))
    # was new_empty((3, 1)) where eager copies the tuple's data (a silent
    # wrong result: an uninitialised 3x1 tensor for tensor([3., 1.]))
    return x.new([[1.0, 2.0, 3.0]]) + x, x.new((3, 1)), x.new([True])


@case(1, 0)
def tensor_new_tensor(x):
    # main: a break (B003) at each (torch.compile: one graph)
    a = x.new_tensor([1, 2, 3])  # x's dtype: float32
    b = x.new_tensor((1.5, 2), dtype=torch.int64)
    return a * x, b, x.new_tensor(7), x.new_tensor(x * 2, dtype=torch.int32)


@case(1, 1)
def tensor_new_of_a_tensor_breaks(x):
    return x.new(x) + 1  # eager's legacy constructor aliases x: a break (B003)


FIRST = operator.itemgetter(0)


class Pair:
    def __init__(self, a, b):
        self.a, self.inner = a, Inner(b)


class Inner:
    def __init__(self, b):
        self.b = b


@case(1, 0)
def itemgetter_in_and_outside(x):
    # main: a call of an itemgetter object broke (B006)
    rows = operator.itemgetter(1, 0)(x)
    pairs = sorted([(2, x), (1, x * 2)], key=FIRST)
    try:
        operator.itemgetter(5)([x])
    except IndexError as e:
        err = str(e)
    return rows, FIRST(x), pairs[0][1], err


@case(1, 0)
def attrgetter_dotted(x):
    p = Pair(x, x * 3)
    a, b = operator.attrgetter("a", "inner.b")(p)
    return a + b, operator.attrgetter("shape")(x), operator.attrgetter("T")(x)


@case(1, 0)
def methodcaller_with_arguments(x):
    total = operator.methodcaller("sum", 0)(x)
    kept = operator.methodcaller("sum", dim=1, keepdim=True)(x)
    return total, kept, operator.methodcaller("view", -1)(x), operator.methodcaller("upper")("ab")


@case(1, 0)
def builtin_min_max_of_one_element_tensors(x):
    # main: max() comparing tensors broke (B001); NaN compares false as in eager
    a, b, nan = x[0, 1:2], x[1, :1] - 2, x[0, :1] / 0 * 0
    return max(a, b), min(a, b, a - 1), max(nan, a).isnan(), max(a, nan), min(x.sum(), x.mean())


@case(1, 1)
def builtin_max_of_larger_tensors_breaks(x):
    try:
        return max(x, x * 2)  # eager raises: bool() of a 6-element tensor
    except RuntimeError as e:
        return str(e)


@case(1, 0)
def builtin_min_max_of_an_iterable_of_one_element_tensors(x):
    # main: max() comparing tensors broke (B001) where the tensors came in one iterable
    # (a generator expression, a list, an iterator); torch.compile: one graph
    return (max(t.sum() for t in [x, x * 2, x - 9]), min([x[0, :1], x[1, :1] - 5]),
            max(iter([x.mean(), x.mean()])), min((r.sum() for r in x), default=None))


@case(0, 1)
def builtin_max_of_an_iterable_of_larger_tensors_breaks(x):
    try:
        return max(t * 2 for t in [x, x])  # eager raises: bool() of a 6-element tensor
    except RuntimeError as e:
        return str(e)


@case(1, 0)
def torch_tensor_of_a_traced_tensor(x):
    # main: a break (B003)
    y = x * 2
    a = torch.tensor(y)
    a.add_(1)  # a copy: y unchanged
    b = torch.tensor(y, dtype=torch.int64)
    return a, y, b, torch.as_tensor(y) is y, torch.as_tensor(y, dtype=torch.float64)


@case(1, 0)
def addcmul_addcdiv_lerp_with_tensor_values(x):
    # main: addcmul/addcdiv with a tensor value broke (B007)
    v = x[0, 1]  # 0-dim; eager reads it as a Scalar
    a = x.clone()
    a.addcmul_(x, x + 1, value=v)
    a.addcdiv_(x, x + 1, value=v * 2)
    a.lerp_(x * 3, v / 4)
    return a, torch.addcmul(x, x, x, value=v.double())


@case(1, 1)
def addcdiv_with_a_tensor_value_of_one_dim_breaks(x):
    try:
        return torch.addcdiv(x, x, x + 1, value=x[0, :1])  # eager: TypeError
    except TypeError as e:
        return str(e)


@case(1, 0)
def foreach_ops_per_tensor(x):
    # main: each torch._foreach_* call broke (B007)
    ts = (x, x[0] * 2)
    a = torch._foreach_add(ts, 1.0)
    b = torch._foreach_mul(ts, [2.0, 3.0])
    c = torch._foreach_add(a, b, alpha=2)
    torch._foreach_mul_(c, 0.5)
    torch._foreach_addcmul_(c, a, b, [1.0, 2.0])
    d = torch._foreach_addcdiv(c, a, b, 0.5)
    e = torch._foreach_lerp(a, b, 0.25)
    m = torch._foreach_maximum(ts, x[0, 2])
    n = [v.round(decimals=3) for v in torch._foreach_norm(ts)]
    torch._foreach_zero_(a)
    return c, d, e, m, n, a, torch._foreach_sqrt(b), torch._foreach_max(ts)


@case(1, 0)
def namedtuple_defined_inside(x):
    # main: namedtuple's eval and attribute writes broke (B006, 3 x B010);
    # the class is made once, when traced (eager: once per call)
    P = collections.namedtuple("P", "a b", defaults=[3])
    p = P(x)
    q = p._replace(b=x * 2)
    return p.a + p.b, tuple(q), q._asdict(), isinstance(q, tuple), type(q).__name__, P._fields


@case(1, 0)
def tensor_keys_of_a_dict_made_inside(x):
    # main: d[x] and `x in d` broke (B002, B001); a tensor key is found by
    # identity, as in eager
    y = x * 2
    d = {x: 1, "k": y}
    d[x] += 1
    d[y] = "y"
    return d[x], x in d, y in d, (x + 0) in d, d.get(y), len(d), d["k"]


def norm(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", v.dtype, v.tolist())
    if isinstance(v, (list, tuple)):
        return (type(v), [norm(i) for i in v])
    if isinstance(v, dict):
        return (type(v), [(k, norm(i)) for k, i in v.items()])
    return (type(v), v)


def observe(fn, x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = ("ok", norm(fn(x)))
        except Exception as e:  # the exception is the observable result
            result = ("raised", type(e), str(e))
    return result, [str(w.message) for w in caught if str(w.message).startswith("ptc")]


def test_new_tensor_of_a_tensor_warns_as_eager():
    def f(x):
        return x.new_tensor(x) + 1

    with pytest.warns(UserWarning) as want:
        f(torch.ones(2))
    with pytest.warns(UserWarning) as got:
        ptc.compile(f, backend="eager", fullgraph=True)(torch.ones(2))
    assert [str(w.message) for w in got] == [str(w.message) for w in want]


KNOWN = {"a": 1, "b": 2}
KNOWN_KEYS = KNOWN.keys()
TAGS = frozenset({"fast", "exact"})


@case(1, 0)
def in_on_outside_keys_and_sets(x):
    # main: PTC-B006 ('in' on an outside dict_keys / frozenset)
    return x * ("a" in KNOWN_KEYS) + ("z" in KNOWN_KEYS), x * ("fast" in TAGS), "slow" in TAGS


@case(1, 0)
def float_power_is_float64(x):
    # main: pow in the operands' dtype (float32, int64 for an int tensor and
    # an int exponent), where eager computes and returns float64; the
    # method broke (PTC-B007)
    return (torch.float_power(x, 2), x.float_power(x), torch.float_power(2, x.long()),
            torch.float_power(x.int(), 3))


@case(1, 0)
def square_and_dot_keep_eagers_dtype(x):
    # main: square of a bool tensor stayed bool (eager: int64), dot of int32
    # tensors was int64 (eager: int32)
    i = x.flatten().int()
    return torch.square(x > 2), torch.dot(i, i), i.dot(i * 2), torch.inner(i, i)


@case(1, 1)
def dot_of_bool_raises(x):
    # main: int64 where eager raises
    b = x.flatten() > 2
    return torch.dot(b, b)


@case(1, 0)
def addcmul_of_integer_tensors_stays_integer(x):
    # main: float32 (the value multiplied as a float), eager: int64 with the
    # value cast to an integer (0.5 counts 0)
    i = x.long()
    return torch.addcmul(i, i, i, value=2), torch.addcmul(i, i, i, value=0.5), torch.addcmul(x, i, i)


@case(1, 1)
def addcdiv_of_integer_tensors_raises(x):
    # main: a float result where eager raises (integer division)
    i = x.long()
    return torch.addcdiv(i, i, i + 1)


@case(1, 1)
def norm_of_an_integer_tensor_raises(x):
    # main: a value where eager raises ('Expected a floating point')
    return torch.norm(x.long())


@case(1, 1)
def hypot_of_integer_tensors_raises(x):
    # main: a value where eager raises NotImplementedError
    return torch.hypot(x.long(), x.long())


@case(1, 1)
def lerp_of_mixed_dtypes_raises(x):
    # main: a value where eager raises (end of another dtype)
    return torch.lerp(x, x.double(), 0.5)


@case(1, 0)
def var_mean_and_std_mean(x):
    # main: a break at each (PTC-B007, "torch.var_mean"), so BatchNorm-style
    # statistics written with them ran eagerly between two graphs
    return (torch.var_mean(x, 1), torch.var_mean(x, dim=(0, 1), unbiased=False),
            torch.std_mean(x, 0, keepdim=True), torch.var_mean(x, correction=2),
            torch.std_mean(x, False))


@case(1, 0)
def pixel_shuffle_and_unshuffle(x):
    # main: a break at each (PTC-B007, torch.pixel_shuffle)
    t = x.repeat(2, 2).reshape(1, 4, 3, 2)
    s = torch.nn.functional.pixel_shuffle(t, 2)
    return s, torch.nn.functional.pixel_unshuffle(s, 2), torch.pixel_shuffle(t.reshape(4, 3, 2), 1)


@case(1, 1)
def pixel_shuffle_of_indivisible_channels_raises(x):
    return torch.nn.functional.pixel_shuffle(x.reshape(1, 3, 2, 1), 2)


@case(1, 0)
def count_nonzero_over_dims(x):
    # main: a break (PTC-B007, torch.count_nonzero)
    return torch.count_nonzero(x), x.count_nonzero(1), torch.count_nonzero(x - 1, (0, -1))


@case(0, 1)
def count_nonzero_over_a_repeated_dim_raises(x):
    return torch.count_nonzero(x, (1, 1))


@case(1, 0)
def tril_and_triu_indices(x):
    # main: a break at each (PTC-B007): constants of the graph now
    return x[tuple(torch.tril_indices(2, 3))], torch.triu_indices(3, 3, 1) + x.sum().long()


@case(1, 0)
def nansum_and_nanmean(x):
    # main: a break at each (PTC-B007)
    y = torch.where(x > 3, float("nan"), x)
    return (torch.nansum(y), y.nansum(1), torch.nansum(y, (0, 1), keepdim=True), y.nanmean(),
            torch.nanmean(y, dim=0))


@case(1, 1)
def nanmean_of_integers_raises(x):
    return torch.nanmean(x.long())


@case(1, 0)
def heaviside_sinc(x):
    # main: a break at each (PTC-B007); sinc at 0 (its values elsewhere, torch's
    # vectorised sin against sin, are compared within rounding below)
    return (torch.heaviside(x - 2, torch.tensor(0.5)), (x - 2).heaviside(x[0]),
            torch.heaviside(x.long() - 2, torch.tensor([7])), torch.sinc(x * 0),
            torch.special.sinc(x.long() * 0))


@case(1, 1)
def heaviside_of_mixed_dtypes_raises(x):
    return torch.heaviside(x, torch.tensor([1]))


@pytest.mark.parametrize("fn,graphs,breaks", CASES)
def test_like_eager(fn, graphs, breaks):
    x = torch.arange(6.0).reshape(2, 3)
    want = observe(fn, x)
    compiled = ptc.compile(fn, backend="eager")
    first = observe(compiled, x)
    ex = ptc.ExplainOutput(list(compiled._events()), None)
    assert (ex.graph_count, ex.break_count) == (graphs, breaks)
    compiles = [e for e in compiled._events() if e["kind"] == "compile"]
    assert [first, observe(compiled, x)] == [want, want]
    assert [e for e in compiled._events() if e["kind"] == "compile"] == compiles  # no recompile


@pytest.mark.parametrize("fn,graphs,breaks", [c for c in CASES if c.values[2] == 0])
def test_fullgraph_like_eager(fn, graphs, breaks):
    x = torch.arange(6.0).reshape(2, 3)
    assert observe(ptc.compile(fn, backend="eager", fullgraph=True), x) == observe(fn, x)


def test_builtin_max_gradient_reaches_the_argument_picked():
    def f(a, b):
        return max(a * 2, b) * 3

    grads = []
    for fn in (f, ptc.compile(f)):
        a, b = torch.tensor([2.0], requires_grad=True), torch.tensor([1.0], requires_grad=True)
        fn(a, b).sum().backward()
        grads.append((a.grad.tolist(), b.grad))
    # b, not picked, gets no gradient: None in eager, zeros through where
    # (as under torch.compile)
    assert grads[0][0] == grads[1][0] == [6.0]
    assert grads[0][1] is None and grads[1][1].tolist() == [0.0]


@pytest.mark.filterwarnings("ignore:To copy construct")
def test_torch_tensor_of_an_input_is_a_detached_copy():
    def f(x):
        return torch.tensor(x), torch.as_tensor(x)

    x = torch.arange(3.0, requires_grad=True)
    (a, b), (ea, eb) = ptc.compile(f)(x), f(x)
    assert (a.requires_grad, b is x, a.tolist()) == (ea.requires_grad, eb is x, ea.tolist()) == (False, True, [0, 1, 2])
    with torch.no_grad():
        a.add_(5)
    assert x.tolist() == [0, 1, 2]


def test_namedtuple_defined_inside_is_returned_whole():
    def f(x):
        P = collections.namedtuple("P", ["a", "b"])
        return P(x, x * 2)

    p = ptc.compile(f, fullgraph=True)(torch.ones(2))
    assert type(p).__name__ == "P" and p._fields == ("a", "b") and p.b.tolist() == [2.0, 2.0]


def test_in_on_outside_keys_follows_the_dict():
    """The answer of `in` on an outside dict's keys() is guarded: a key
    added later recompiles."""
    x = torch.ones(2)
    compiled = ptc.compile(in_on_outside_keys_and_sets, backend="eager")
    assert observe(compiled, x) == observe(in_on_outside_keys_and_sets, x)
    KNOWN["z"] = 3
    try:
        assert observe(compiled, x) == observe(in_on_outside_keys_and_sets, x)
        assert any("in" in e["guard"] for e in compiled._events() if e["kind"] == "recompile")
    finally:
        del KNOWN["z"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_var_mean_compiled_by_ptc_matches_eager(dtype):
    """torch.var_mean / std_mean through ptc's kernels (not the eager
    backend): every argument form gives eager's tuple of two tensors."""
    def f(x):
        return (torch.var_mean(x.float(), dim=(0, 2, 3), unbiased=False), torch.var_mean(x, 1),
                torch.std_mean(x, [1, 2], keepdim=True), torch.var_mean(x, correction=0),
                torch.std_mean(x, True))
    x = torch.randn(4, 3, 5, 6).to(dtype)
    compiled = ptc.compile(f, fullgraph=True)
    got, want = compiled(x), f(x)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is tuple and len(g) == 2
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_var_mean_reads_its_input_once(tmp_path):
    """The mean beside a var over the same dims is the var's Welford mean:
    one reduction kernel, no second pass summing the input (BatchNorm-style
    statistics: on an H200 two passes over bf16 [32,64,112,112])."""
    import glob
    ptc.config.trace_dir = str(tmp_path)
    try:
        x = torch.randn(8, 4, 6, 6)
        got = ptc.compile(lambda t: torch.var_mean(t, dim=(0, 2, 3)), fullgraph=True)(x)
    finally:
        ptc.config.trace_dir = None
    for g, w in zip(got, torch.var_mean(x, dim=(0, 2, 3))):
        torch.testing.assert_close(g, w)
    kernels = open(glob.glob(str(tmp_path / "**" / "kernels.txt"), recursive=True)[0]).read()
    assert kernels.count(" welford ") == 1 and " sum of " not in kernels, kernels


def test_var_mean_gradients_match_eager():
    def f(x):
        v, m = torch.var_mean(x, dim=(0, 2))
        s, m2 = torch.std_mean(x, 1, keepdim=True)
        return (v * m).sum() + (s * m2).sum()
    x = torch.randn(5, 3, 7, dtype=torch.float64, requires_grad=True)
    want, = torch.autograd.grad(f(x), x)
    got, = torch.autograd.grad(ptc.compile(f)(x), x)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("channels_last", [False, True])
def test_pixel_shuffle_and_count_nonzero_compiled_by_ptc_match_eager(channels_last):
    """Values, strides (a channels-last input's results are channels-last,
    as eager's) and pixel_shuffle's gradient from ptc's kernels against
    eager's (a composite of view, permute, reshape and clone; count_nonzero a
    sum of x != 0)."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 3, 4)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_()

    def f(x):
        s = torch.nn.functional.pixel_shuffle(x, 2)
        u = torch.nn.functional.pixel_unshuffle(s.sin(), 2)
        return s, u, torch.count_nonzero(x.detach() > 0.5, dim=(1, 3))

    compiled = ptc.compile(f)
    with torch.no_grad():  # a training graph's outputs have its kernels' strides
        for g, w in zip(compiled(x), f(x)):
            assert g.dtype == w.dtype and g.stride() == w.stride()
            torch.testing.assert_close(g, w)
    want, got = f(x), compiled(x)
    gw = torch.autograd.grad((want[0] * want[1].sum()).sum(), x)[0]
    gg = torch.autograd.grad((got[0] * got[1].sum()).sum(), x)[0]
    torch.testing.assert_close(gg, gw)


def test_nanmean_and_sinc_compiled_by_ptc_match_eager():
    """Values and gradients from ptc's kernels against eager's: nanmean
    (NaNs left out of sum and count), sinc (1 at 0)."""
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    x[0, 1], x[2, 3] = float("nan"), 0.0
    x.requires_grad_()

    def f(x):
        return torch.nanmean(x, 1), torch.sinc(torch.nan_to_num(x)), torch.sinc(x.long())

    want, got = f(x), ptc.compile(f)(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)
    # sinc's gradient at 0 is 0, as eager's (a NaN through the quotient before)
    gw = torch.autograd.grad(want[0].sum() + want[1].sum(), x)[0]
    gg = torch.autograd.grad(got[0].sum() + got[1].sum(), x)[0]
    torch.testing.assert_close(gg, gw, equal_nan=True)
