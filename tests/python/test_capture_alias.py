"""Aliasing under ptc.compile, against eager PyTorch.

In-place ops on views (of inputs and of tensors made in the graph) must reach
the tensors the views alias; outputs that are views of an input or of another
output must come back as views (writes through them reach the input, `_base`
and storage as in eager); tensor arguments that are one object must stay one
object (`a is b`), and a graph traced for distinct arguments must not run for
aliased ones, nor the other way round; outputs keep eager's strides.

Each program runs eagerly and compiled (twice: a compile and a cache hit) on
fresh arguments; the observations compared are the results' values, strides,
storage sharing with the arguments and with each other, `_base`, the
arguments after the call, and the arguments after a write through the first
output.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402

PROGRAMS = []


def prog(args=None, graphs=None, breaks=None):
    def add(fn):
        PROGRAMS.append(pytest.param(fn, args or x23, graphs, breaks, id=fn.__name__))
        return fn
    return add


def x23():
    return (torch.arange(6.0).reshape(2, 3),)


def same_twice():
    a = torch.arange(6.0).reshape(2, 3)
    return (a, a)


def two():
    return (torch.arange(6.0).reshape(2, 3), torch.ones(2, 3))


# ---- in-place ops on views of an input (basic indexing: written back after the
# graph, as the input itself; other views: a break that runs for real) ----

@prog(graphs=1, breaks=0)
def select_add_(x):
    x[0].add_(1)
    return x.sum()


@prog()
def column_mul_(x):
    x[:, 1].mul_(0)
    return x.sum()


@prog()
def transpose_add_(x):
    x.t().add_(1)
    return x.sum()


@prog()
def view_then_slice_add_(x):
    x.view(-1)[:3].add_(1)
    return x.sum()


@prog()
def select_zero_(x):
    x[0].zero_()
    return x * 2


@prog()
def select_fill_(x):
    x[0].fill_(7)
    return x + 0


@prog()
def select_copy_(x):
    x[1].copy_(torch.ones(3))
    return x.sum()


@prog()
def select_clamp_(x):
    x[0].clamp_(max=1)
    return x.sum()


@prog()
def select_masked_fill_(x):
    x[0].masked_fill_(x[0] > 0, -1.0)
    return x.sum()


@prog()
def select_relu_(x):
    x[0].sub_(5).relu_()
    return x.sum()


@prog()
def functional_relu_(x):
    torch.nn.functional.relu_(x[0].sub_(1))
    return x.sum()


@prog()
def narrow_addcmul_(x):
    x.narrow(1, 0, 2).addcmul_(x[:, :2], x[:, :2])
    return x.sum()


@prog()
def unsqueeze_div_(x):
    x.unsqueeze(0).div_(2)
    return x.sum()


@prog()
def reshape_select_pow_(x):
    x.reshape(3, 2)[1].pow_(2)
    return x.sum()


@prog()
def chunk_neg_(x):
    a, b = x.chunk(2, 1)
    b.neg_()
    return x.sum()


@prog()
def unbind_sub_(x):
    a, b = x.unbind(0)
    b.sub_(1)
    return x.sum()


@prog()
def select_index_put_(x):
    x[0].index_put_((torch.tensor([0, 2]),), torch.tensor(9.0))
    return x.sum()


@prog()
def permute_lerp_(x):
    x.permute(1, 0).lerp_(torch.zeros(3, 2), 0.5)
    return x.sum()


@prog()
def view_written_then_read(x):
    v = x[0]
    v.mul_(3)
    return x + v


@prog(same_twice)
def inplace_through_an_aliased_argument(a, b):
    a[0].add_(1)
    return b.sum()


# ---- in-place ops on views of tensors made in the graph ----

@prog(graphs=1, breaks=0)
def inner_select_add_(x):
    y = x * 2
    y[0].add_(1)
    return y


@prog(graphs=1, breaks=0)  # a reshaped view is followed (torch_permviews.c): no break
def inner_view_then_slice_add_(x):
    y = x * 2
    y.view(-1)[:3].add_(1)
    return y


@prog()
def inner_transpose_select_mul_(x):
    y = x * 2
    y.t()[0].mul_(0)
    return y


@prog(graphs=1, breaks=0)
def inner_two_views(x):
    y = x * 2
    a = y[0]
    b = y[:, 1]
    a.add_(10)
    return y, b, a


@prog(graphs=1, breaks=2)
def inner_view_written_after_a_break(x):
    y = x * 2
    v = y[0]
    print("a break")
    v.add_(1)
    return y, v


@prog(graphs=2, breaks=3)
def views_kept_in_a_list_across_breaks(x):
    # rows[0] (a view of x, another input) is written back after its graph;
    # reading x, which shares its memory, is the third break
    rows = []
    for i in range(2):
        rows.append(x[i])
        print(i)
    rows[0].add_(5)
    return x.sum(), rows[0], rows[1]


# ---- outputs that alias ----

@prog(graphs=1, breaks=0)
def returns_view(x):
    return x.view(-1)


@prog(graphs=1, breaks=0)
def returns_select(x):
    return x[0]


@prog(graphs=1, breaks=0)
def returns_transpose(x):
    return x.t()


@prog(graphs=1, breaks=0)
def returns_two_rows(x):
    return x[0], x[1]


@prog(graphs=1, breaks=0)
def returns_views_of_an_output(x):
    y = x + 1
    return y, y[0], y.t(), y[1][1:]


@prog(graphs=0, breaks=0)
def returns_to_same_dtype(x):
    return x.to(torch.float32), x.float()


# ---- argument identity ----

@prog(same_twice, graphs=1, breaks=0)
def argument_is(a, b):
    return (a + 1) if a is b else (a - b)


@prog(two, graphs=1, breaks=0)
def argument_is_not(a, b):
    return (a + 1) if a is b else (a - b)


def observe(out, args):
    flat = out if isinstance(out, tuple) else (out,)
    outs = [o for o in flat if isinstance(o, torch.Tensor)]
    arg_ptrs = [a.untyped_storage().data_ptr() for a in args]
    obs = [("identity", [o is a for o in flat for a in args])]
    for o in outs:
        ptr = o.untyped_storage().data_ptr()
        obs += [("value", o.tolist()), ("stride", o.stride()), ("offset", o.storage_offset()),
                ("shares with args", [ptr == p for p in arg_ptrs]),
                ("shares with outputs", [ptr == p.untyped_storage().data_ptr() for p in outs]),
                ("_base is arg", [o._base is a for a in args])]
    obs.append(("args after", [a.tolist() for a in args]))
    if outs:
        outs[0][(0,) * outs[0].dim()] = 123.0
    obs.append(("args after a write through the first output", [a.tolist() for a in args]))
    return obs


def run(fn, make_args, compiled):
    args = make_args()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(*args) if compiled else fn(*args)
    ptc_warnings = [str(w.message) for w in caught if str(w.message).startswith("ptc")]
    assert not ptc_warnings, ptc_warnings
    return observe(out, args)


@pytest.mark.parametrize("fn,make_args,graphs,breaks", PROGRAMS)
def test_like_eager(fn, make_args, graphs, breaks):
    expected = run(fn, make_args, None)
    compiled = ptc.compile(fn, backend="ptc")
    for call in range(2):
        got = run(fn, make_args, compiled)
        for e, g in zip(expected, got):
            assert e == g, "call %d: %s: eager %r, ptc %r" % (call + 1, e[0], e[1], g[1])
    if graphs is not None:
        ex = ptc.ExplainOutput(list(getattr(compiled, "_ptc_compiled", compiled)._events()), None)
        assert (ex.graph_count, ex.break_count) == (graphs, breaks)


def test_aliased_and_distinct_arguments_do_not_share_a_graph():
    def f(a, b):
        return (a + 1) if a is b else (a - b)

    a, b = torch.ones(2), torch.full((2,), 3.0)
    compiled = ptc.compile(f)
    for args in [(a, a), (a, b), (a, a), (b, a), (b, b)]:
        assert torch.equal(compiled(*args), f(*args)), args


def test_identity_guards_are_printed():
    def f(a, b, c):
        return a + b + c

    a, b = torch.ones(2), torch.ones(2)
    guards = [g for gs in ptc.explain(f)(a, a, b).guards for g in gs]
    assert "L['b'] is L['a']" in guards and "distinct objects: L['a'], L['c']" in guards, guards


# ---- eager's strides (TensorIterator's layout rules) ----

A = lambda: torch.arange(12.0).reshape(4, 3)
B = lambda: torch.arange(24.0).reshape(2, 3, 4)
CL = lambda: torch.arange(120.0).reshape(2, 3, 4, 5).to(memory_format=torch.channels_last)
LAYOUTS = [
    ("transposed", lambda x: x.t() + 1, A),
    ("transposed_twice", lambda x: x.t() * x.t(), A),
    ("contiguous_first", lambda x: x.t().contiguous() + x.t(), A),
    ("transposed_first", lambda x: x.t() + x.t().contiguous(), A),
    ("broadcast_row", lambda x: x.t() + torch.ones(4), A),
    ("permute3", lambda x: x.permute(2, 0, 1) * 2, B),
    ("transpose12", lambda x: x.transpose(1, 2) - 1, B),
    ("channels_last", lambda x: torch.relu(x) + 1, CL),
    ("channels_last_and_contiguous", lambda x: x + x.contiguous(), CL),
    ("sliced", lambda x: x.t()[1:] + 1, A),
    ("strided_slice", lambda x: x[:, ::2] + 1, A),
    ("where", lambda x: torch.where(x.t() > 3, x.t(), 0.0), A),
    ("cast", lambda x: x.t().double(), A),
    ("size_one_dim", lambda x: x[:1].t() + 1, A),
    ("unsqueezed", lambda x: x.t().unsqueeze(0) + 1, A),
    ("made_contiguous", lambda x: (x.t() + 1).contiguous(), A),
    ("clone", lambda x: x.t().clone(), A),
    ("after_matmul", lambda x: (x @ x.t()).t() + 1, A),
    ("view_of_an_intermediate", lambda x: (x * 2).t(), A),
    # a view that covers part of an intermediate is eager's view of all of
    # it: strides and storage offset (main: a contiguous copy)
    ("column_of_an_intermediate", lambda x: (x * 2)[:, 1], A),
    ("row_of_a_like", lambda x: torch.ones_like(x.permute(2, 0, 1))[1], B),
    ("slice_of_a_transposed_result", lambda x: (x.t() + 1)[1:, ::2], A),
    ("narrowed_sum", lambda x: x.sum(0).narrow(1, 1, 2), B),
]


@pytest.mark.parametrize("backend", ["ptc", "eager"])
@pytest.mark.parametrize("name,fn,make", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_outputs_keep_eager_strides(name, fn, make, backend):
    expected, got = fn(make()), ptc.compile(fn, backend=backend)(make())
    assert torch.equal(expected, got)
    assert got.stride() == expected.stride() and got.storage_offset() == expected.storage_offset()
    if expected._base is None:  # a view of an intermediate keeps a base ptc does not return
        assert got._base is None
    elif name.endswith(("intermediate", "like", "result", "sum")) and "view_of" not in name:
        assert got._base is not None and got._base.numel() == expected._base.numel()


def test_views_of_one_intermediate_share_it_as_in_eager():
    # two returned views of one unreturned intermediate share its storage,
    # and a view of a returned view is a view of it (main: three copies)
    def f(x):
        y = x * 2
        z = y.t()
        return y[0], y[:, 1], z, z[1]

    for backend in ("ptc", "eager"):
        want, got = f(A()), ptc.compile(f, backend=backend, fullgraph=True)(A())
        for w, g in zip(want, got):
            assert torch.equal(w, g) and w.stride() == g.stride()
            assert w.storage_offset() == g.storage_offset()
        got[0].fill_(-1)
        assert got[1][0].item() == -1 and got[2][1, 0].item() == -1 and got[3][0].item() == -1


def test_views_of_constants_made_while_tracing_stay_copies():
    # torch.tensor(...) in the function is a constant ptc keeps: a view of it
    # handed to the user would let the next call see the user's writes.
    def f(x):
        c = torch.tensor([1.0, 2.0])
        return c[0], x + 1

    compiled = ptc.compile(f, backend="ptc")
    first, _ = compiled(torch.ones(2))
    first.fill_(100.0)
    second, _ = compiled(torch.ones(2))
    assert second.item() == 1.0
