"""numpy's in-place sort and its flip views, traced (issue 13 part 3).

ndarray.sort() sorts the array in place: traced as torch's stable sort of
the array written back into it (through x.numpy() into x, through an
argument's array into the argument). np.flip is a view with negative
strides in numpy: of an argument's array it is traced as a view of that
graph input, and a flipped array that leaves the graph (returned, or alive
at a break) is numpy's flip of its base again, a view that shares the
base's memory as eager's does. A slice with a negative step (a[::-1]) is
a flip view sliced forwards. torch.compile (torch 2.11, backend="eager",
torch._dynamo.explain) makes one graph with no break for each program of
the parametrized tests here, as ptc does, but differs from eager in two:
a 0-d array for sort_along_axis_0_of_a_copy's numpy scalar, and its flip
is a copy, so flip_of_an_argument_written_through's write misses b (its
returned flips are copies too); ptc agrees with eager in all.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import ptc  # noqa: E402
from test_capture_numpy_traced import counts, breaks, described  # noqa: E402


def x23():
    return torch.tensor([[3.0, 1.0, 2.0], [6.0, 4.0, 5.0]])


def same_layout_copy(a):
    """A copy of array a with its strides' order and signs."""
    backward = tuple(i for i, s in enumerate(a.strides) if s < 0)
    return np.flip(np.flip(a, backward).copy(order="K"), backward) if backward else a.copy(order="K")


def one_graph(f, *args, backend="eager"):
    """f under ptc.compile (fullgraph) agrees with eager on fresh copies of
    args (with their strides): the result, and the arguments as the program
    left them."""
    fresh = lambda: [same_layout_copy(a) if isinstance(a, np.ndarray) else a.clone() for a in args]
    compiled = ptc.compile(f, backend=backend, fullgraph=True)
    want_args, got_args = fresh(), fresh()
    want = f(*want_args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ptc warning (an internal error's fallback)
        got = compiled(*got_args)
    assert described(got) == described(want)
    assert described(got_args) == described(want_args)  # the arguments written as eager's
    assert counts(compiled) == (1, 0), breaks(compiled)
    return want_args, got_args, got


def sort_through_the_tensor(x):
    a = x.numpy()
    r = a.sort()
    return r, a * 1, x + 0


def sort_along_axis_0_of_a_copy(x):
    a = x.numpy() * 1
    a.sort(axis=0)
    return a, a[0].sum()


def sort_of_ints_then_read(x):
    a = (x.numpy() * -1).astype(np.int64)
    a.sort(axis=-1, kind="stable")
    return a[:, 0], a


def sort_of_a_row(x):
    a = x.numpy()
    a[1].sort()  # a view: the write reaches a and x
    return a.copy()


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("prog", [sort_through_the_tensor, sort_along_axis_0_of_a_copy,
                                  sort_of_ints_then_read, sort_of_a_row])
def test_ndarray_sort_is_an_in_place_sort_of_the_array(prog, backend):
    """main: PTC-B007 "numpy's ndarray.sort (not traced by ptc)"."""
    one_graph(prog, x23(), backend=backend)


def test_ndarray_sort_of_an_argument_sorts_the_argument():
    def f(b):
        b.sort()
        return b.sum(axis=0), b

    want_args, got_args, got = one_graph(f, np.array([[2.0, 9.0, -1.0], [0.5, 0.25, 7.0]]))
    assert got[1] is got_args[0]


def test_ndarray_sort_raises_where_eager_raises():
    def f(x):
        a = x.numpy()
        a.sort(axis=None)  # numpy: TypeError, an axis is needed
        return a

    with pytest.raises(TypeError):
        f(x23())
    with pytest.raises(TypeError):
        ptc.compile(f, backend="eager")(x23())


NP_GLOBAL = np.arange(3.0, dtype=np.float32)


def flip_of_a_global(x):
    return np.flip(NP_GLOBAL) + x.numpy()[0]


def flip_of_an_argument(b, x):
    return np.flip(b) + x.numpy()[0], np.flip(b, 0)[0] * 2


def flip_of_an_argument_written_through(b):
    f = np.flip(b, 1)
    f[0, 0] = 100.0  # b[0, -1]
    return b.sum(), f.sum(axis=0)


@pytest.mark.parametrize("prog, args", [
    (flip_of_an_argument, lambda: (np.arange(6.0).reshape(2, 3), torch.ones(2, 3, dtype=torch.float64))),
    (flip_of_an_argument_written_through, lambda: (np.arange(6.0).reshape(2, 3),)),
    (flip_of_a_global, lambda: (x23(),)),
], ids=["flip_of_an_argument", "written_through", "flip_of_a_global"])
def test_flip_of_an_array_from_outside_is_a_view_of_the_input(prog, args):
    """main: PTC-B007 "numpy's flip of an array from outside"."""
    one_graph(prog, *args())


def test_returned_flip_of_an_argument_is_a_view_of_it():
    def f(b):
        return np.flip(b, 1), np.flip(np.flip(b), 0), b.sum()

    b = np.arange(6.0).reshape(2, 3)
    want = f(b)
    _, (c,), got = one_graph(f, b)
    for w, g in zip(want[:2], got[:2]):
        assert g.strides == w.strides and np.shares_memory(g, c)
    c[0, 0] = -7.0
    assert got[0][0, 2] == -7.0 and got[1][0, 2] == -7.0


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_returned_flip_of_a_tensors_array_is_a_view(backend):
    """main: a copy (contiguous strides, no memory shared with x)."""
    def f(x):
        a = x.numpy()
        m = a * 2
        return np.flip(a, 1), np.flip(m), m

    x = x23()
    out = ptc.compile(f, backend=backend, fullgraph=True)(x)
    want = f(x23())
    assert described(out) == described(want)
    assert out[0].strides == want[0].strides and np.shares_memory(out[0], x.numpy())
    assert out[1].strides == want[1].strides and np.shares_memory(out[1], out[2])


def test_flip_alive_at_a_break_is_a_view():
    """main: a copy, so the write to a after the break did not show in v."""
    def f(x):
        a = x.numpy() * 2
        v = np.flip(a)
        print("between")
        a[-1, -1] = -1.0  # v[0, 0]
        return a.sum(), v

    compiled = ptc.compile(f, backend="eager")
    got, want = compiled(x23()), f(x23())
    assert described(got) == described(want)
    assert counts(compiled) == (2, 1)


def negative_steps(x):
    a = x.numpy()
    return (a[::-1] * 2, a[:, ::-2] + 1, a[1::-1, 2:0:-1].sum(axis=0), a[0, ::-1], a[..., ::-1],
            a[None, ::-1, 1], a[0:1:-1].shape, a[-1:-3:-1, -1::-2].copy())


def writes_through_negative_steps(x):
    a = x.numpy() * 1
    a[::-1][0, 0] = 100.0  # a[1, 0]
    r = a[:, ::-1]
    r[0] += 10.0  # a[0, ::-1]
    a[1, 1::-1] = a[0, :2] * -1  # a[1, 1], a[1, 0]
    return a.copy(), r.copy(), x * 1


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("prog", [negative_steps, writes_through_negative_steps])
def test_slices_with_negative_steps_are_flip_views(prog, backend):
    """numpy's a[::-1] is a view with negative strides, which torch has not:
    flip views sliced forwards. main: PTC-B022 "slice step must be
    positive" and PTC-B007 for each (torch.compile: one graph, none)."""
    one_graph(prog, x23(), backend=backend)


def test_negative_step_slices_take_numpys_items():
    """Every start, stop and step of a negative-step slice of a 5-array
    (out-of-range bounds and empty results included) against numpy."""
    bounds = [None, -7, -5, -2, 0, 1, 3, 4, 9]
    for step in (-1, -2, -3, -6):
        for start in bounds:
            for stop in bounds:
                s = slice(start, stop, step)
                f = lambda x: (lambda a: (a[s] * 1, a[s].shape))(x.numpy())  # noqa: B023,E731
                compiled = ptc.compile(f, backend="eager", fullgraph=True)
                x = torch.arange(5.0)
                assert described(compiled(x)) == described(f(x)), s


def reversed_rows():
    return np.arange(6.0).reshape(2, 3)[::-1]


def uses_a_negatively_strided_argument(b, x):
    r = b * x.numpy(), b.sum(axis=0), b[0, ::-1] + 1
    b[0, 0] = 100.0  # the memory of base[1, 0]
    return r, b.copy()


def test_an_argument_with_negative_strides_is_a_flip_of_a_graph_input():
    """torch has no negative strides (torch.from_numpy raises): numpy code
    on such an array takes it as the flip of its positively strided view,
    which is the graph input (made again per call, guarded like any input),
    so writes reach the argument's memory. main: PTC-B007 "At least one
    stride in the given numpy array is negative" at each use."""
    b_base, c_base = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)
    x = torch.ones(2, 3, dtype=torch.float64)
    compiled = ptc.compile(uses_a_negatively_strided_argument, backend="eager", fullgraph=True)
    got, want = compiled(b_base[::-1], x), uses_a_negatively_strided_argument(c_base[::-1], x)
    assert described(got) == described(want)
    assert b_base.tolist() == c_base.tolist()  # the write reached the argument's base
    assert counts(compiled) == (1, 0), breaks(compiled)


def test_arrays_of_other_strides_recompile():
    """The graph input is np.flip(b, dims) for the dims b's strides run
    backwards along; an array whose strides run otherwise is traced again."""
    f = lambda b: (b * 2).sum(axis=1)  # noqa: E731
    compiled = ptc.compile(f, backend="eager", fullgraph=True)
    base = np.arange(12.0).reshape(3, 4)
    for b in (base[::-1], base, base[:, ::-1], base[::-1, ::-2], base[::-1]):
        assert described(compiled(b)) == described(f(b))
    assert counts(compiled) == (4, 0), breaks(compiled)


def test_flip_made_before_a_break_and_written_after_it():
    """main: the write and the read after the break ran for real (PTC-B007:
    torch.from_numpy raises for the flip's negative strides)."""
    def f(x):
        a = x.numpy() * 2
        v = np.flip(a)
        print("between")
        v[0, 0] = -1.0  # a[-1, -1]
        return a, v, v.sum()

    compiled = ptc.compile(f, backend="eager")
    got, want = compiled(x23()), f(x23())
    assert described(got) == described(want)
    assert np.shares_memory(got[0], got[1])
    assert counts(compiled) == (2, 1), breaks(compiled)


def test_returned_flip_of_a_negatively_strided_argument_is_a_view_of_it():
    def f(b):
        return np.flip(b), np.flip(b, 1), b[::-1], b.sum()

    base = np.arange(6.0).reshape(2, 3)
    want = f(base[::-1])
    got = ptc.compile(f, backend="eager", fullgraph=True)(base[::-1])
    assert described(got) == described(want)
    assert np.shares_memory(got[0], base) and np.shares_memory(got[1], base)
    assert got[0].strides == want[0].strides and got[1].strides == want[1].strides


def sort_of_a_reversed_view(x):
    a = x.numpy()
    a[::-1].sort()  # the rows sorted backwards in a's memory
    return a.copy()


def sort_of_a_backward_argument(b):
    b.sort(axis=0)
    return b.copy()


def write_through_a_reversed_slice(x):
    a = x.numpy()
    v = a[::-1, 1:]
    v += 1
    return a.copy(), np.flip(v).T.copy()


def slices_of_a_backward_argument(b):
    return b[::-1][:1] * 2, b[2:0:-1].sum()


@pytest.mark.parametrize("prog, args", [
    (sort_of_a_reversed_view, lambda: (torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]]),)),
    (sort_of_a_backward_argument, lambda: (np.array([[3.0, 1.0], [0.0, 5.0], [2.0, 2.0]])[::-1, ::-1],)),
    (write_through_a_reversed_slice, lambda: (torch.arange(6.0).reshape(2, 3),)),
    (slices_of_a_backward_argument, lambda: (np.arange(4.0)[::-1],)),
], ids=["sort_of_a_reversed_view", "sort_of_a_backward_argument", "write_through_a_reversed_slice",
        "slices_of_a_backward_argument"])
def test_sorts_writes_and_slices_through_backward_views(prog, args):
    one_graph(prog, *args())


def views_of_the_tensors_array(x):
    a = x.numpy()
    return a[0], a[:, ::-1], a.T, a[1:, ::2], np.einsum("ij->ji", a), a[::-1].T, a * 2


def views_of_an_argument(b):
    return b[1], b.T, b[::-1, 1:], b.transpose(1, 0)[0], b.sum()


@pytest.mark.parametrize("prog, args, shared", [
    (views_of_the_tensors_array, lambda: (x23(),), 6),
    (views_of_an_argument, lambda: (np.arange(6.0).reshape(2, 3),), 4),
    (views_of_an_argument, lambda: (np.arange(6.0).reshape(2, 3)[:, ::-1],), 4),
], ids=["of_the_tensors_array", "of_an_argument", "of_a_backward_argument"])
@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_returned_views_of_an_argument_share_its_memory(prog, args, shared, backend):
    """An array returned that is, in eager, a view (indexing, a transpose, a
    flip) of an argument's memory is that view again, with eager's strides.
    main: copies where the view is over a flip (a negative-step slice)."""
    want_args, got_args, got = one_graph(prog, *args(), backend=backend)
    want = prog(*want_args)
    memory = lambda a: a if isinstance(a, np.ndarray) else a.numpy()  # noqa: E731
    for i, (g, w) in enumerate(zip(got[:shared], want[:shared])):
        assert g.strides == w.strides and np.shares_memory(g, memory(got_args[0])), i


def test_a_reversed_slice_alive_at_a_break_is_a_view():
    """After the break a and v are two inputs over one buffer and a is
    written: the read of v runs for real after a break of its own
    (PTC-B012, then PTC-B006 for the method of the real array)."""
    def f(x):
        a = x.numpy() * 2
        v = a[:, ::-1][1:]
        print("between")
        a[1, 0] = -1.0  # v[0, -1]
        return a.sum(), v.copy()

    compiled = ptc.compile(f, backend="eager")
    assert described(compiled(x23())) == described(f(x23()))
    assert counts(compiled) == (2, 3), breaks(compiled)
    assert breaks(compiled)[1].startswith("PTC-B012"), breaks(compiled)


def test_argument_arrays_overlapping_at_another_offset_are_aliases():
    """b = a[1:] shares a's memory from its second item: torch.from_numpy
    gives each a storage of its own (starting where the array starts), so
    comparing the storages' first addresses missed it and the graph read b
    before a's write. main: [1, 2, 3] where eager gives [100, 2, 3]."""
    def f(a, b):
        a[1] = 100.0
        return b * 1

    compiled = ptc.compile(f, backend="eager")
    for make in (lambda: (lambda m: (m, m[1:]))(np.arange(4.0)),
                 lambda: (np.arange(4.0), np.arange(3.0)),  # no memory shared: the guard passes
                 lambda: (lambda m: (m[::2], m[1::2]))(np.arange(8.0))):  # interleaved: a break
        got_args, want_args = make(), make()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no ptc warning (an internal error's fallback)
            got = compiled(*got_args)
        assert described(got) == described(f(*want_args))
        assert described(list(got_args)) == described(list(want_args))


def test_tensor_operator_with_a_backward_array_is_one_graph():
    """x + b of a tensor and an array with negative strides runs numpy's
    ufunc on x.numpy() and b in eager; ptc reads b through the flip of its
    graph input. main: PTC-B007 "At least one stride ... is negative"."""
    def f(x, b):
        return x + b, x * b[:, ::-1], x - b, x / (b + 1), x // (b + 1)

    x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    one_graph(f, x, np.arange(6.0).reshape(2, 3)[::-1])
    with pytest.raises(ValueError):  # x == b converts b as torch does: eager raises
        ptc.compile(lambda x, b: x == b, backend="eager")(x, np.arange(6.0).reshape(2, 3)[::-1])
