"""Classes made inside the traced function (issue 13 part 3): a class
statement, dataclasses and namedtuple run for real while tracing, and the
class is a constant of the trace. Each program runs eagerly and under
ptc.compile(backend="eager") twice: results must agree (classes compared by
name, fields and repr, since eager makes a new class per call), and the
first call must give the pinned graph and break counts. The counts of
torch._dynamo.explain (torch 2.11) are in each comment.
"""
import dataclasses
import functools

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402

CASES = []


def case(graphs, breaks):
    def add(fn):
        CASES.append(pytest.param(fn, graphs, breaks, id=fn.__name__))
        return fn
    return add


def norm(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", v.dtype, v.tolist())
    if isinstance(v, (list, tuple)):
        return ("seq", [norm(i) for i in v])
    if isinstance(v, type):
        return ("class", v.__qualname__)
    return (type(v).__qualname__, v)


@case(1, 0)
def dataclass_with_tensor_field(x):
    # main: 1 graph, 3 breaks (PTC-B017 class definition, PTC-B025
    # _process_class, PTC-B010 write to the class); dynamo: 1 graph, 0 breaks
    @dataclasses.dataclass
    class P:
        a: torch.Tensor
        b: int = 2

    p = P(x * 2)
    return p.a + p.b, [f.name for f in dataclasses.fields(p)], isinstance(p, P), type(p)


@case(1, 0)
def dataclass_eq_and_repr_of_plain_fields(x):
    # main: 1 graph, 3 breaks (as above); dynamo: 1 graph, 0 breaks
    @dataclasses.dataclass(frozen=True, order=True)
    class Cfg:
        n: int
        tag: str = "a"

    a, b = Cfg(2), Cfg(2, "b")
    return x * a.n, a == Cfg(2), a == b, a < b, repr(b)


@case(1, 0)
def class_with_a_tensor_method(x):
    # main: 1 graph, 1 break (PTC-B017); dynamo: 1 graph, 0 breaks
    class Scale:
        k = 3

        def __init__(self, t):
            self.t = t

        def apply(self, y):
            return self.t * self.k + y

    s = Scale(x.sin())
    return s.apply(x), isinstance(s, Scale), type(s).__name__


@case(1, 0)
def class_body_reads_a_closure_variable(x):
    # main: 1 graph, 1 break (PTC-B017); dynamo: 1 graph, 0 breaks
    width = 4

    class Box:
        w = width * 2

        def area(self, t):
            return t * self.w

    return Box().area(x), Box.w


@case(1, 0)
def user_decorator_writes_the_class(x):
    # main: 1 graph, 8 breaks (PTC-B017, then PTC-B010 for each attribute
    # total_ordering and with_offset write); dynamo: 1 graph, 0 breaks
    def with_offset(cls):
        cls.offset = 5
        return cls

    @with_offset
    @functools.total_ordering
    class V:
        def __init__(self, v):
            self.v = v

        def __eq__(self, o):
            return self.v == o.v

        def __lt__(self, o):
            return self.v < o.v

    return x + V.offset, V(1) >= V(2), V(3) > V(2)


@case(1, 0)
def subclass_of_a_class_made_inside(x):
    # main: 1 graph, 2 breaks (PTC-B017 twice); dynamo: 1 graph, 0 breaks
    class Base:
        def f(self, t):
            return t + 1

    class Child(Base):
        def f(self, t):
            return super().f(t) * 2

    return Child().f(x), issubclass(Child, Base)


@pytest.mark.parametrize("fn,graphs,breaks", CASES)
def test_like_eager(fn, graphs, breaks):
    x = torch.arange(6.0).reshape(2, 3)
    want = norm(fn(x))
    compiled = ptc.compile(fn, backend="eager")
    first = norm(compiled(x))
    ex = ptc.ExplainOutput(list(compiled._events()), None)
    assert (ex.graph_count, ex.break_count) == (graphs, breaks)
    compiles = [e for e in compiled._events() if e["kind"] == "compile"]
    assert [first, norm(compiled(x))] == [want, want]
    assert [e for e in compiled._events() if e["kind"] == "compile"] == compiles  # no recompile


@pytest.mark.parametrize("fn,graphs,breaks", [c for c in CASES if c.values[2] == 0])
def test_fullgraph_like_eager(fn, graphs, breaks):
    x = torch.arange(6.0).reshape(2, 3)
    assert norm(ptc.compile(fn, backend="eager", fullgraph=True)(x)) == norm(fn(x))


def test_the_class_is_made_once_per_trace():
    """Eager makes a new class per call; the compiled code keeps the one it
    made when tracing."""
    def f(x):
        class P:
            pass
        return x + 1, P

    compiled = ptc.compile(f, fullgraph=True)
    x = torch.ones(2)
    assert f(x)[1] is not f(x)[1]
    assert compiled(x)[1] is compiled(x)[1]


SCALE = 2


def test_a_global_the_class_body_reads_is_guarded():
    def f(x):
        class P:
            k = SCALE
        return x * P.k

    global SCALE
    compiled = ptc.compile(f, fullgraph=True)
    x = torch.ones(2)
    assert compiled(x).tolist() == [2.0, 2.0]
    SCALE = 3
    try:
        assert compiled(x).tolist() == [3.0, 3.0]
    finally:
        SCALE = 2


def test_a_class_body_reading_a_tensor_breaks():
    """A class attribute computed from a traced tensor: the class statement
    runs at a break (dynamo: 2 graphs, 1 break, "call to a function marked
    as skipped")."""
    def f(x):
        y = x * 2

        class Holder:
            t = y + 1

        return Holder.t * 3

    compiled = ptc.compile(f, backend="eager")
    x = torch.arange(3.0)
    assert compiled(x).tolist() == f(x).tolist()
    breaks = ptc.ExplainOutput(list(compiled._events()), None).breaks
    assert [(b["code"], b["detail"]) for b in breaks] == [
        ("PTC-B017", "class definition reads a closure variable, a traced tensor")]
