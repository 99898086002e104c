"""Graph breaks inside inlined methods: the resumed segments hit the cache.

A break inside a method ptc inlined (a module's forward called as
`self.block(x)`, each block of a ModuleList loop, a method of a plain object)
resumes in a frame whose function the previous segment rebuilds on every call.
The resumed frame's guards check what the frame still uses of it (its code and
globals, and the object a bound method is bound to), so identical calls after
the first compile nothing, while swapping the method still recompiles. Results
and printed text agree with eager on every call.
"""
import contextlib
import functools
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import ptc  # noqa: E402


def events(compiled):
    return getattr(compiled, "_ptc_compiled", compiled)._events()


def kinds(compiled, kind):
    return [e for e in events(compiled) if e["kind"] == kind]


class Block(nn.Module):
    def __init__(self, dim, tag):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.tag = tag

    def forward(self, x):
        h = self.fc(x)
        if h.abs().mean() > 10:  # a break on a tensor value, inside the inlined forward
            h = h * 0.1
        print("block", self.tag)  # a side effect after the break
        return x + torch.relu(h)


class Model(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.block = Block(dim, "a")
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        return self.head(self.block(x) * 2)


class Stack(nn.Module):
    def __init__(self, dim=8, n=3):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, str(i)) for i in range(n)])

    def forward(self, x):
        for block in self.blocks:  # each block breaks: resumes mid-loop
            x = block(x)
        return x.sum(-1)


class Scaler:
    """Not a module: its method is inlined like any other."""

    def __init__(self, factor):
        self.factor = factor
        self.seen = None

    def apply(self, h):
        if h.sum() > 0:
            h = h * self.factor
        self.seen = tuple(h.shape)  # a write to an outside object, after the break
        return h - 1


SCALER = Scaler(3.0)


def uses_scaler(x):
    return SCALER.apply(x * 2) + 1


def run(fn, x, calls=4):
    """Results and printed text of `calls` calls."""
    out = []
    for _ in range(calls):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), torch.no_grad():
            y = fn(x)
        out.append((y, buf.getvalue()))
    return out


def check_like_eager(model_or_fn, x, calls=4):
    compiled = ptc.compile(model_or_fn, backend="eager")
    got, want = run(compiled, x, calls), run(model_or_fn, x, calls)
    for i, ((y, text), (ey, etext)) in enumerate(zip(got, want)):
        assert torch.allclose(y, ey, atol=1e-6), "call %d: result differs" % (i + 1)
        assert text == etext, "call %d: printed %r, eager %r" % (i + 1, text, etext)
    return compiled


def test_break_in_inlined_forward_hits_the_cache():
    torch.manual_seed(0)
    model = Model().eval()
    x = torch.randn(4, 8)
    compiled = ptc.compile(model, backend="eager")
    run(compiled, x, 1)
    first = len(kinds(compiled, "compile"))
    assert first == 3, "the start and the resume points after the branch and the print: %d" % first
    check = check_like_eager(model, x)
    assert not kinds(check, "recompile"), [e["guard"] for e in kinds(check, "recompile")]
    run(compiled, x, 3)
    assert len(kinds(compiled, "compile")) == first, "later calls compiled again"
    assert not kinds(compiled, "recompile"), [e["guard"] for e in kinds(compiled, "recompile")]


def test_break_in_inlined_forward_both_branches():
    torch.manual_seed(0)
    model = Model().eval()
    small, big = torch.randn(4, 8), torch.randn(4, 8) * 1000
    compiled = ptc.compile(model, backend="eager")
    for x in (small, big, small, big, small):
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            assert torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-4)
    n = len(kinds(compiled, "compile"))
    for x in (small, big):
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            compiled(x)
    assert len(kinds(compiled, "compile")) == n
    assert not kinds(compiled, "recompile"), [e["guard"] for e in kinds(compiled, "recompile")]


def test_break_in_module_list_loop_resumes_mid_loop():
    torch.manual_seed(0)
    model = Stack().eval()
    x = torch.randn(4, 8)
    compiled = check_like_eager(model, x, calls=1)
    # The first call compiles each resume point once per block: the loop's
    # iterator position is guarded (each block is a different module).
    n = len(kinds(compiled, "compile"))
    assert n == 1 + 2 * 3, n
    before = len(events(compiled))
    got, want = run(compiled, x, 4), run(model, x, 4)
    for (y, text), (ey, etext) in zip(got, want):
        assert torch.allclose(y, ey, atol=1e-6) and text == etext == "block 0\nblock 1\nblock 2\n"
    later = [e for e in events(compiled)[before:] if e["kind"] in ("compile", "recompile")]
    assert not later, later


def test_break_in_method_of_plain_object():
    x = torch.randn(4, 8)
    compiled = check_like_eager(uses_scaler, x)
    assert not kinds(compiled, "recompile"), [e["guard"] for e in kinds(compiled, "recompile")]
    SCALER.seen = None
    run(compiled, x, 2)
    assert SCALER.seen == (4, 8)  # the write after the resume happened
    assert len(kinds(compiled, "compile")) == 2
    assert not kinds(compiled, "recompile"), [e["guard"] for e in kinds(compiled, "recompile")]


def nested_function(x):
    def inner(h):  # made on every call: the resumed frame's function is new each time
        if h.sum() > 0:
            h = h * 2
        print("inner")
        return h + 1

    return inner(x) * 3


def object_made_in_the_call(x):
    return Scaler(0.5).apply(x + 1)


@pytest.mark.parametrize("fn", [nested_function, object_made_in_the_call], ids=lambda f: f.__name__)
def test_break_in_function_made_in_the_call(fn):
    x = torch.randn(4, 8)
    compiled = check_like_eager(fn, x)
    assert not kinds(compiled, "recompile"), [e["guard"] for e in kinds(compiled, "recompile")]


def test_resumed_frame_guards_its_function():
    """The resumed frame's function is still guarded (its code), never dropped."""
    torch.manual_seed(0)
    model = Model().eval()
    compiled = ptc.compile(model, backend="eager")
    run(compiled, torch.randn(4, 8), 1)
    guards = [g for e in kinds(compiled, "compile") for g in (e.get("guards") or [])]
    text = "\n".join(str(g) for g in guards)
    assert "F1.__code__ is" in text, text


def test_swapping_the_method_recompiles():
    torch.manual_seed(0)
    model = Model().eval()
    x = torch.randn(4, 8)
    compiled = ptc.compile(model, backend="eager")
    run(compiled, x, 2)
    assert not kinds(compiled, "recompile")

    def other_forward(self, x):
        h = self.fc(x)
        if h.abs().mean() > 10:
            h = h * 0.1
        print("other", self.tag)
        return x - h

    saved = Block.forward
    try:
        Block.forward = other_forward
        got, want = run(compiled, x, 3), run(model, x, 3)
        for (y, text), (ey, etext) in zip(got, want):
            assert torch.allclose(y, ey, atol=1e-6) and text == etext == "other a\n"
        recompiles = kinds(compiled, "recompile")
        assert len(recompiles) == 1, [e["guard"] for e in recompiles]
        # the reason names the method the class has now, not the instance
        assert "(now <function test_swapping_the_method_recompiles.<locals>.other_forward" in \
            recompiles[0]["guard"], recompiles[0]["guard"]
    finally:
        Block.forward = saved
    got = run(compiled, x, 1)[0]
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        assert torch.allclose(got[0], model(x), atol=1e-6) and got[1] == "block a\n"


# ---- values of a resumed state that the previous segment rebuilds ------------------------


def brk(y):
    if y.sum() > 0:  # a break in a helper: the caller's locals are a resumed state
        y = y - 1
    return y


def local_nested_function(x):
    def inner(h):
        return h * 2

    y = brk(x + 1)
    return inner(y)


def local_function_with_defaults(x):
    def inner(h, k=2.0, *, t=(1, 2)):  # defaults made on every call, equal every time
        return h * k + t[1]

    y = brk(x + 1)
    return inner(y) + inner(y, 3.0)


def local_lambda_list(x):
    fs = [lambda h: h + 1, lambda h: h * 2]
    y = brk(x + 1)
    for f in fs:
        y = f(y)
    return y


def local_closure_cell(x):
    k = 3
    t = x * 0.5

    def inner(h):
        return h * k + t  # cells of the resumed frame, read through the function

    y = brk(x + 1)
    return inner(y) + k


def local_bound_method(x):
    m = Scaler(2.0).apply  # a method of an object made in the call
    y = brk(x + 1)
    return m(y)


@pytest.mark.parametrize("fn", [local_nested_function, local_function_with_defaults, local_lambda_list,
                                local_closure_cell, local_bound_method],
                         ids=lambda f: f.__name__)
def test_rebuilt_values_of_a_resumed_state_hit_the_cache(fn):
    x = torch.randn(4, 8).abs()  # the branch is taken: the break's outcome is the same every call
    compiled = check_like_eager(fn, x, calls=1)
    n = len(kinds(compiled, "compile"))
    got, want = run(compiled, x, 3), run(fn, x, 3)
    assert all(torch.allclose(y, ey) for (y, _), (ey, _) in zip(got, want))
    assert len(kinds(compiled, "compile")) == n, "later calls compiled again"
    assert not kinds(compiled, "recompile"), [e["guard"] for e in kinds(compiled, "recompile")]


def scaled_by_default(x, k):
    def inner(h, s=k):  # a default from an argument: equal defaults, equal guards
        return h * s

    y = brk(x + 1)
    return inner(y)


def test_a_changed_default_recompiles():
    x = torch.randn(4, 8).abs()
    compiled = ptc.compile(scaled_by_default)
    for k in (2.0, 2.0, 3.0, 3.0):
        assert torch.allclose(compiled(x, k), scaled_by_default(x, k))
    reasons = [e["guard"] for e in kinds(compiled, "recompile")]
    assert len(reasons) == 2, reasons  # the entry segment (k) and the resumed one (inner's default)
    assert any("__defaults__ == (2.0,)" in r and "now (3.0,)" in r for r in reasons), reasons


def make_affine(k, t):
    def affine(h):
        return h * k + t

    return affine


AFFINE = make_affine(2.0, torch.ones(8))


def uses_global_closure(x):
    y = brk(x + 1)
    return AFFINE(y)


def test_closure_made_elsewhere_is_guarded_by_its_cells():
    """Guarded by code, not identity: another closure of the same code with
    other cell contents recompiles (a number) or reads the new tensor."""
    global AFFINE
    x = torch.randn(4, 8).abs()
    compiled = ptc.compile(uses_global_closure, backend="eager")
    saved = AFFINE
    try:
        for k, t in [(2.0, torch.ones(8)), (2.0, torch.zeros(8)), (3.0, torch.full((8,), 5.0)), (2.0, torch.ones(8))]:
            AFFINE = make_affine(k, t)
            assert torch.allclose(compiled(x), uses_global_closure(x)), (k, t[0])
    finally:
        AFFINE = saved
    assert len(kinds(compiled, "recompile")) == 1, [e["guard"] for e in kinds(compiled, "recompile")]


# ---- objects whose state a recipe cannot rebuild ---------------------------------------


class Slotted:
    __slots__ = ("a", "__dict__")

    def __init__(self):
        self.a = 2.0  # in a slot, not in __dict__
        self.b = 3.0


class ListSub(list):
    pass


def local_partial(x):
    p = functools.partial(torch.mul, 2)  # a C type: its state is not in __dict__
    y = brk(x + 1)
    return p(y)


def local_slotted(x):
    s = Slotted()
    y = brk(x + 1)
    return y * s.a + s.b


def local_list_subclass(x):
    items = ListSub([1.0, 2.0])
    y = brk(x + 1)
    return y * items[1]


def test_list_subclass_is_rebuilt_across_a_break():
    """A list subclass made in the function is rebuilt as pickle would (its
    class, its items, its attributes): the frame no longer runs eagerly."""
    x = torch.randn(4, 8).abs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = check_like_eager(local_list_subclass, x, calls=2)
    assert not [e for e in events(compiled) if e["kind"] == "untraceable"]


@pytest.mark.parametrize("fn", [local_partial, local_slotted], ids=lambda f: f.__name__)
def test_unrebuildable_object_runs_the_frame_eagerly(fn):
    """Before: the rebuilt object was wrong (TypeError, AttributeError,
    IndexError raised to the caller). Now the frame runs eagerly and says why."""
    x = torch.randn(4, 8).abs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = check_like_eager(fn, x, calls=2)
    why = [e["why"] for e in events(compiled) if e["kind"] == "untraceable"]
    assert why and "state is not in its __dict__" in why[0], why


class NeedsArgs:
    """A recipe rebuilds objects through cls.__new__(cls): this one refuses."""

    def __new__(cls, v):
        return super().__new__(cls)

    def __init__(self, v):
        self.v = v


def rebuild_fails_in_the_first_segment(x):
    s = NeedsArgs(2.0)
    y = brk(x + 1)
    return y * s.v


def rebuild_fails_after_a_break(x):
    print("before")  # ran for real: the call cannot restart from its arguments
    s = NeedsArgs(3.0)
    y = brk(x + 1)
    print("after")
    return y * s.v


@pytest.mark.parametrize("fn", [rebuild_fails_in_the_first_segment, rebuild_fails_after_a_break],
                         ids=lambda f: f.__name__)
def test_a_failed_rebuild_runs_the_rest_eagerly(fn):
    """Before: the TypeError from __new__ reached the caller on every call.
    Now the call goes on eagerly from the state at the segment's start (side
    effects once each, in order), with one warning, and the position runs
    eagerly from then on."""
    x = torch.randn(4, 8).abs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = check_like_eager(fn, x, calls=3)
    msgs = [str(w.message) for w in caught if "ptc" in str(w.message)]
    assert len(msgs) == 1 and "cannot rebuild" in msgs[0] and "NeedsArgs.__new__" in msgs[0], msgs
    fallbacks = [e for e in events(compiled) if e["kind"] == "fallback"]
    assert len(fallbacks) == 1, fallbacks


# ---- a break inside a comprehension ----------------------------------------------------------


def list_comprehension_printing(x):
    return [print(k) or x * k for k in range(3)]


def dict_comprehension_printing(x):
    return {k: (print(k), x * k)[1] for k in range(3)}


def set_comprehension_printing(x):
    return {print(k) or k * 2 for k in range(3)}, x + 1


def comprehension_over_an_outside_iterator(x, items):
    return [x * k for k in items]


def comprehension_over_a_zip_with_an_outside_iterator(x, items):
    return [row * k for row, k in zip(x, items)]


def star_arguments_from_a_comprehension_printing(x):
    # main: a wrong sum (x * 6 for x * 3), or in a longer run a segmentation fault
    def total(*items):
        return sum(items)

    return total(*[print(k) or x * k for k in range(3)])


def plain(v):
    """Comparable form: tensors by exact type and value."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, torch.Tensor):
        return (type(v), v.tolist())
    return v


@pytest.mark.parametrize("fn, make", [
    (list_comprehension_printing, lambda: (torch.ones(2),)),
    (dict_comprehension_printing, lambda: (torch.ones(2),)),
    (set_comprehension_printing, lambda: (torch.ones(2),)),
    (comprehension_over_an_outside_iterator, lambda: (torch.ones(2), iter([1, 2, 3]))),
    (comprehension_over_a_zip_with_an_outside_iterator,
     lambda: (torch.arange(6.0).reshape(2, 3), iter([1, 2]))),
    (star_arguments_from_a_comprehension_printing, lambda: (torch.ones(2),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_break_inside_a_comprehension_keeps_its_items(fn, make):
    # main: the comprehension's container, resumed after the break as a real object,
    # got the next segment's symbolic tensors appended for real: the result held
    # SymTensors ("a symbolic tensor was used after its trace ended", or an empty
    # list on the next call) and the graphs computing them were dropped
    compiled = ptc.compile(fn, backend="eager")
    for _ in range(3):
        out = []
        for f in (fn, compiled):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), warnings.catch_warnings():
                warnings.simplefilter("error")
                out.append((plain(f(*make())), buf.getvalue()))
        assert out[0] == out[1], out
