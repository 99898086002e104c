"""numpy's in-place sort and its flip views, traced (issue 13 part 3).

ndarray.sort() sorts the array in place: traced as torch's stable sort of
the array written back into it (through x.numpy() into x, through an
argument's array into the argument). np.flip is a view with negative
strides in numpy: of an argument's array it is traced as a view of that
graph input, and a flipped array that leaves the graph (returned, or alive
at a break) is numpy's flip of its base again, a view that shares the
base's memory as eager's does (torch.compile returns a copy there; ptc
agrees with eager). torch.compile (torch 2.11, backend="eager") makes one
graph with no break for each program here, as ptc does.
"""
import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import ptc  # noqa: E402
from test_capture_numpy_traced import counts, breaks, described  # noqa: E402


def x23():
    return torch.tensor([[3.0, 1.0, 2.0], [6.0, 4.0, 5.0]])


def one_graph(f, *args, backend="eager"):
    """f under ptc.compile (fullgraph) agrees with eager on fresh copies of
    args: the result, and the arguments as the program left them."""
    fresh = lambda: [a.copy() if isinstance(a, np.ndarray) else a.clone() for a in args]
    compiled = ptc.compile(f, backend=backend, fullgraph=True)
    want_args, got_args = fresh(), fresh()
    want, got = f(*want_args), compiled(*got_args)
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
