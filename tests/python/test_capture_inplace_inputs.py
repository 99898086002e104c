"""In-place writes to the caller's tensors (PTC-B012), against eager.

An argument, a default argument or a module's plain tensor attribute
written in place is one graph: the graph returns its new value and the
caller's tensor gets it after the call, so results and mutations equal
eager's (main broke at every such write). Inputs that share memory with a
written one (f(x, x[0]), f(x, x.view(-1))) would read the old value inside
the graph: the trace breaks there and the entry is guarded on the written
inputs sharing no memory with the others, so the aliased call takes its own
path. f(x, x) is one input. A write to an input that requires grad stays a
break: autograd records it on the caller's tensor itself.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


def counts(compiled):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    ex = ptc.ExplainOutput(list(handle._events()), None)
    return ex.graph_count, ex.break_count, [b["detail"] for b in ex.breaks]


def compiles(compiled):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return len([e for e in handle._events() if e["kind"] in ("compile", "recompile")])


def run_both(fn, make_args, calls=3):
    """fn eagerly and compiled on fresh copies of the same arguments: the
    results and the arguments after each call must be equal."""
    compiled = ptc.compile(fn, backend="eager")
    for _ in range(calls):
        want_args, got_args = make_args(), make_args()
        want, got = fn(*want_args), compiled(*got_args)
        assert torch.equal(want, got), (want, got)
        for w, g in zip(want_args, got_args):
            assert torch.equal(w, g), (w, g)
    return compiled


def adds_to_its_argument(x):
    x.add_(1)
    return x * 2


def writes_two_arguments(x, y):
    x.mul_(2)
    y.sub_(x)
    return x + y


def test_argument_written_in_place_is_one_graph():
    # main: (1, 1, ['in-place op on a tensor from outside (x)'])
    compiled = run_both(adds_to_its_argument, lambda: (torch.arange(4.0),))
    assert counts(compiled) == (1, 0, []) and compiles(compiled) == 1
    compiled = run_both(writes_two_arguments, lambda: (torch.arange(4.0), torch.ones(4)))
    assert counts(compiled) == (1, 0, []) and compiles(compiled) == 1


def test_written_argument_passed_twice_is_one_input():
    # f(x, x): y is x, so y sees x's write (eager: x * 2 - x * 2 = 0)
    compiled = run_both(writes_two_arguments, lambda: (lambda a: (a, a))(torch.arange(4.0)))
    assert counts(compiled) == (1, 0, [])


def aliased_read_after_write(x, y):
    x.add_(1)
    return y * 10


@pytest.mark.parametrize("alias", ["row", "view", "same storage, other offset"])
def test_argument_sharing_memory_with_a_written_one_is_read_after_the_write(alias):
    """f(x, x[0]) and f(x, x.view(-1)): the graph would read y's old value,
    so the trace breaks before y is read; f(x, other) keeps its one graph
    and a later aliased call does not run it (the guard)."""
    make = {
        "row": lambda: (lambda a: (a, a[0]))(torch.arange(6.0).reshape(2, 3)),
        "view": lambda: (lambda a: (a, a.view(-1)))(torch.arange(6.0).reshape(2, 3)),
        "same storage, other offset": lambda: (lambda a: (a[0], a[1]))(torch.arange(6.0).reshape(2, 3)),
    }[alias]
    compiled = run_both(aliased_read_after_write, make)
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and "shares memory" in details[0], details
    # the unaliased call first, then the aliased one: a guard tells them apart
    compiled = run_both(aliased_read_after_write, lambda: tuple(t.clone() for t in make()))
    assert counts(compiled)[:2] == (1, 0)
    want_args, got_args = make(), make()
    assert torch.equal(aliased_read_after_write(*want_args), compiled(*got_args))
    assert all(torch.equal(w, g) for w, g in zip(want_args, got_args))
    handle = compiled
    reasons = [e["guard"] for e in handle._events() if e["kind"] == "recompile"]
    assert reasons and "written in place, sharing no memory" in reasons[0], reasons


def writes_alias_after_reading_both(x, y):
    s = y.sum()
    x.add_(1)
    return s + x.sum()


def test_alias_of_a_written_argument_read_before_the_write_breaks_at_the_write():
    compiled = run_both(writes_alias_after_reading_both,
                        lambda: (lambda a: (a, a[1:]))(torch.arange(4.0)))
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and "shares memory with another input" in details[0], details


def fills_its_default(x, acc=torch.zeros(3)):
    acc.add_(x)
    return acc * 1


def test_default_argument_written_in_place_persists_across_calls():
    # eager: the default tensor accumulates in fills_its_default.__defaults__
    compiled = ptc.compile(fills_its_default, backend="eager")
    acc = fills_its_default.__defaults__[0]
    for call in range(1, 4):
        out = compiled(torch.ones(3))
        assert torch.equal(out, torch.full((3,), float(call)))
        assert torch.equal(acc, torch.full((3,), float(call)))
        assert fills_its_default.__defaults__[0] is acc
    assert counts(compiled) == (1, 0, []) and compiles(compiled) == 1


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.total = torch.zeros(3)  # a plain tensor attribute, not a buffer

    def forward(self, x):
        self.steps.add_(1)
        self.total.add_(x)
        return x * self.steps + self.total


def test_module_tensor_attribute_written_in_place_is_one_graph():
    # main: a break at self.total.add_ (only buffers were written back)
    eager, compiled_module = Counter(), Counter()
    compiled = ptc.compile(compiled_module, backend="eager")
    for _ in range(3):
        x = torch.arange(3.0)
        assert torch.equal(eager(x), compiled(x))
        assert torch.equal(eager.total, compiled_module.total)
        assert torch.equal(eager.steps, compiled_module.steps)
    assert counts(compiled) == (1, 0, [])


def test_argument_that_requires_grad_stays_a_break_and_raises_like_eager():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError) as eager_error:
        adds_to_its_argument(x)
    compiled = ptc.compile(adds_to_its_argument, backend="eager")
    with pytest.raises(RuntimeError) as ptc_error:
        compiled(x)
    assert str(ptc_error.value) == str(eager_error.value)
    assert "autograd records it on the tensor itself" in counts(compiled)[2][0]


def test_fullgraph_argument_write_is_one_graph():
    x = torch.arange(4.0)
    assert torch.equal(ptc.compile(adds_to_its_argument, fullgraph=True)(x), torch.arange(1.0, 5.0) * 2)
    assert torch.equal(x, torch.arange(1.0, 5.0))


def writes_through_views_of_its_argument(x):
    x[0].add_(1)
    x[:, 1].mul_(0)
    x[1][1:] = 7
    return x.sum()


def test_writes_through_basic_views_of_an_argument_are_one_graph():
    # main: a break at x[0].add_ ('in-place op on a view of a tensor from outside')
    compiled = run_both(writes_through_views_of_its_argument, lambda: (torch.arange(6.0).reshape(2, 3),))
    assert counts(compiled) == (1, 0, [])


def writes_through_pieces(x):
    a, b = x.chunk(2)
    b.add_(1)
    x.split([1, 3], dim=1)[1][0].mul_(10)
    rows = x.unbind()
    rows[1].sub_(rows[0])
    x.narrow(1, -2, 1).neg_()
    x.select(1, 0).add_(100)
    return torch.cat([x.flatten(), a.flatten(), b.flatten(), rows[1]])  # the views see every write


def test_writes_through_chunk_split_unbind_narrow_select_are_one_graph():
    # main: a break at b.add_ ('in-place op on a view of a tensor from
    # outside other than basic indexing'); each piece is the part of x that
    # basic indexing picks (x.chunk(2)[1] is x[2:4]), written back after the call
    compiled = run_both(writes_through_pieces, lambda: (torch.arange(16.0).reshape(4, 4),))
    assert counts(compiled) == (1, 0, [])
    for fn in (ptc.compile(writes_through_pieces), ptc.compile(writes_through_pieces, fullgraph=True)):
        want_x, got_x = torch.arange(16.0).reshape(4, 4), torch.arange(16.0).reshape(4, 4)
        assert torch.equal(writes_through_pieces(want_x), fn(got_x)) and torch.equal(want_x, got_x)


def returns_a_written_piece(x):
    a, b = x.chunk(2, dim=1)
    b.add_(1)
    return b


def test_a_returned_piece_is_a_view_of_the_argument():
    x = torch.zeros(2, 4)
    b = ptc.compile(returns_a_written_piece, backend="eager")(x)
    b.fill_(5)  # eager: b is a view of x, so x sees it
    assert torch.equal(x, torch.tensor([[0.0, 0, 5, 5], [0, 0, 5, 5]]))


def writes_through_a_copying_reshape(x):
    x.t().reshape(-1)[:2].add_(1)  # a reshape of a transposed x: a copy in eager
    return x.sum()


def test_write_through_another_view_of_an_argument_stays_a_break():
    # basic indexing, transposes, reshapes of row-major inputs and the
    # pieces of chunk, split, unbind, narrow and select are followed; a
    # reshape that may copy is not
    compiled = run_both(writes_through_a_copying_reshape, lambda: (torch.arange(6.0).reshape(2, 3),))
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and "other than basic indexing" in details[0], details


SHARED = torch.arange(4.0)
SHARED_TAIL = SHARED[1:]


def writes_then_reads_a_global_alias(x):
    x[1] = 100.0
    return SHARED_TAIL * 1


def test_global_sharing_memory_with_a_written_argument_breaks_where_it_is_read():
    """The global was a graph input though its read broke: the entry's
    guard that its written inputs share no memory failed on the state it
    was made from (main: 'a fresh entry rejects its own state', an internal
    error and the call run eagerly with a warning)."""
    compiled = ptc.compile(writes_then_reads_a_global_alias, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compiled(SHARED)
    assert torch.equal(got, torch.tensor([100.0, 2.0, 3.0])) and SHARED[1] == 100.0
    graphs, breaks, details = counts(compiled)
    assert (graphs, breaks) == (2, 1) and "shares memory" in details[0], details


def writes_through_out(x, y, z):
    r = torch.add(x, 1, out=y)  # written, converted to y's dtype, returned as y
    torch.mul(x, 2, out=z[0])  # through a view of an argument
    s = torch.exp(x, out=torch.empty(3))  # a tensor made in the function
    return r * (r is y) + s + torch.sub(x, 2, alpha=3, out=x)  # out= is an input


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_out_argument_is_written_and_returned_in_one_graph(backend):
    # main: a break at each (PTC-B007 'torch.add with out='; torch.compile: one graph)
    def make_args():
        return torch.arange(3.0), torch.zeros(3, dtype=torch.float64), torch.zeros(2, 3)

    compiled = ptc.compile(writes_through_out, backend=backend, fullgraph=True)
    want_args, got_args = make_args(), make_args()
    want, got = writes_through_out(*want_args), compiled(*got_args)
    assert want.dtype == got.dtype and torch.allclose(want, got)
    for w, g in zip(want_args, got_args):
        assert w.dtype == g.dtype and torch.allclose(w, g), (w, g)
    assert counts(compiled) == (1, 0, [])


def test_out_argument_of_another_shape_breaks_and_raises_like_eager():
    def resizes(x, y):
        return torch.add(x, 1, out=y)  # eager resizes y: a break, run for real

    compiled = ptc.compile(resizes, backend="eager")
    y = torch.zeros(0)
    assert torch.equal(compiled(torch.ones(3), y), torch.full((3,), 2.0)) and y.shape == (3,)
    assert counts(compiled)[:2] == (0, 1)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        compiled(torch.ones(3), torch.zeros(3, dtype=torch.int64))


def assigns_through_index_tensors(x, i, v):
    x[i] = v  # rows named twice take the last value, as torch's CPU kernel
    y = x * 2
    y[:, torch.tensor([0, -1])] = torch.tensor([[7.0], [8.0], [9.0], [10.0]])
    y[i[:0]] = 5.0  # names no row
    return y


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_item_assignment_with_an_index_tensor_is_one_graph(backend):
    # main: a break at each (PTC-B007 'item assignment with a tensor index';
    # torch.compile: one graph)
    def make_args():
        return torch.zeros(4, 3), torch.tensor([1, -1, 1]), torch.arange(9.0).view(3, 3)

    compiled = ptc.compile(assigns_through_index_tensors, backend=backend, fullgraph=True)
    want_args, got_args = make_args(), make_args()
    want, got = assigns_through_index_tensors(*want_args), compiled(*got_args)
    assert torch.equal(want, got)
    for w, g in zip(want_args, got_args):
        assert torch.equal(w, g), (w, g)
    assert counts(compiled) == (1, 0, [])


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_item_assignment_out_of_range_raises_like_eager(backend):
    compiled = ptc.compile(assigns_through_index_tensors, backend=backend)
    for bad in ([1, 4], [-5]):
        args = torch.zeros(4, 3), torch.tensor(bad), torch.ones(3)
        with pytest.raises(IndexError) as want:
            assigns_through_index_tensors(*args)
        with pytest.raises(IndexError) as got:
            compiled(*args)
        assert str(got.value) == str(want.value)


def puts_through_index_put(x, i):
    y = x.index_put((i,), torch.tensor(4.0))  # a copy
    x.index_put_([i[:1]], torch.tensor([[7.0, 8.0, 9.0]]))  # x itself, returned
    return y, x.index_put_((i,), torch.tensor(1.0)) is x


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_index_put_is_one_graph(backend):
    # main: a break at each (PTC-B007 'Tensor.index_put_'; torch.compile: one graph)
    compiled = ptc.compile(puts_through_index_put, backend=backend, fullgraph=True)
    want_x, got_x = torch.zeros(3, 3), torch.zeros(3, 3)
    want = puts_through_index_put(want_x, torch.tensor([2, -3]))
    got = compiled(got_x, torch.tensor([2, -3]))
    assert torch.equal(want[0], got[0]) and want[1] is got[1] is True
    assert torch.equal(want_x, got_x)
    assert counts(compiled) == (1, 0, [])


def test_index_put_of_another_dtype_raises_like_eager():
    def f(x):
        return x.index_put_((torch.tensor([1]),), torch.tensor(9))  # int values: eager raises

    for fn in (f, ptc.compile(f, backend="eager")):
        with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
            fn(torch.ones(2, 3))


# ---- operands that overlap the written tensor: eager refuses them -----------------------------

def overlap_outcome(fn, x):
    try:
        return "ok", fn(x).tolist(), x.tolist()
    except RuntimeError as e:
        return RuntimeError, str(e), x.tolist()


@pytest.mark.parametrize("name,fn,refused", [
    ("row_into_its_matrix", lambda x: x.add_(x[0]), True),
    ("transpose_into_itself", lambda x: x.mul_(x.t()), True),
    ("shifted_slices", lambda x: x[1:].add_(x[:-1]), True),
    ("row_into_a_temporary", lambda x: (lambda y: y.sub_(y[2]))(x * 2), True),
    # equal memory with equal strides, disjoint memory, non-dense views: allowed
    ("itself", lambda x: x.add_(x), False),
    ("the_same_row", lambda x: x[0].add_(x[0]), False),
    ("another_row", lambda x: x[0].add_(x[1]), False),
    ("strided_columns", lambda x: x[:, 0].add_(x[:, 1]), False),
    # ops traced as several steps, and copy_, whose result is its source
    ("addcmul_shifted", lambda x: x[1:].addcmul_(x[:-1], x[:-1]), True),
    ("addcmul_rows_of_itself", lambda x: x.addcmul_(x[0], x[1]), True),
    ("addcdiv_shifted", lambda x: x[1:].addcdiv_(x[:-1], x[:-1] + 1), True),
    ("copy_shifted", lambda x: x[1:].copy_(x[:-1]), True),
    ("copy_a_row_into_its_matrix", lambda x: x.copy_(x[0]), True),
    ("add_out_shifted", lambda x: torch.add(x[:-1], 1, out=x[1:]), True),
    ("addcmul_other_rows", lambda x: x[0].addcmul_(x[1], x[2]), False),
    ("copy_itself", lambda x: x.copy_(x), False),
    ("copy_another_row", lambda x: x[0].copy_(x[1]), False),
    ("copy_strided_columns", lambda x: x[:, 0].copy_(x[:, 1]), False),
    ("fill_with_its_element", lambda x: x.fill_(x[0, 0]), False),  # read as a scalar first
], ids=lambda v: v if isinstance(v, str) else "")
def test_in_place_operand_overlapping_the_written_tensor_raises_like_eager(name, fn, refused):
    """main returned a value where eager raises "unsupported operation: some
    elements of the input tensor and the written-to tensor refer to a single
    memory location": the trace breaks there and the op raises for real."""
    want = overlap_outcome(fn, torch.arange(9.0).view(3, 3))
    got = overlap_outcome(ptc.compile(fn), torch.arange(9.0).view(3, 3))
    assert got == want
    assert (want[0] is RuntimeError) == refused, want
    if not refused:  # and one graph
        compiled = ptc.compile(fn)
        compiled(torch.arange(9.0).view(3, 3))
        assert counts(compiled)[:2] == (1, 0)


@pytest.mark.parametrize("name,fn", [
    ("fill_element", lambda x: x.fill_(x[0, 0])),
    ("fill_int_into_float", lambda x: x.fill_(torch.tensor(3))),
    ("fill_float_into_int", lambda x: x.int().fill_(x[1, 1] / 3)),
    ("fill_a_row", lambda x: x[1].fill_(x.sum())),
    ("fill_bool", lambda x: (x > 0).fill_(x[0, 1])),
    ("copy_float_into_int", lambda x: x.int().copy_(x / 2)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_fill_and_copy_take_tensor_values_in_one_graph(name, fn):
    """fill_ with a 0-dim tensor (a break, PTC-B006, before) and copy_ of
    another dtype (a float into an integer tensor: a break before, which
    other in-place ops take where eager refuses them) are one graph, with
    eager's values."""
    def f(x):
        y = x * 1
        return fn(y), y

    def flat(g):
        return lambda x: torch.cat([t.float().flatten() for t in g(x)])

    compiled = ptc.compile(f)
    want = overlap_outcome(flat(f), torch.arange(9.0).view(3, 3) - 2)
    got = overlap_outcome(flat(compiled), torch.arange(9.0).view(3, 3) - 2)
    assert got == want and want[0] == "ok"
    assert counts(compiled)[:2] == (1, 0)


def test_fill_with_a_tensor_of_dims_raises_like_eager():
    def f(x):
        return (x * 1).fill_(x[0])

    want = overlap_outcome(f, torch.ones(2, 3))
    assert overlap_outcome(ptc.compile(f), torch.ones(2, 3)) == want and want[0] is RuntimeError
