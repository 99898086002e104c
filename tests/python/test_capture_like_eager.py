"""Capture where a guard or a shortcut used to miss, each compared with eager.

Every case here ran silently differently from eager once: a replaced
__code__, a container resized while iterated, a generator expression consumed
by a builtin that breaks, torch.manual_seed inside the function, a user's
TorchFunctionMode, exception chaining and tracebacks, and functions marked
torch.compiler.disable. Each test compares results, exceptions and state with
the same program run eagerly.
"""
import inspect
import traceback
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


def outcome(fn, *args):
    """What a call did: ("ok", result) or ("raise", type, message)."""
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - any exception is an outcome to compare
        return ("raise", type(e), str(e))


def same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def check_like_eager(fn, *args, backend="eager", calls=2):
    compiled = ptc.compile(fn, backend=backend)
    for i in range(calls):
        want, got = outcome(fn, *args), outcome(compiled, *args)
        assert want[0] == got[0] and same(want[1:], got[1:]), "call %d: eager %r, ptc %r" % (i + 1, want, got)
    return compiled


# ---- generator expressions and iterators consumed by builtins that break ------------------


def max_of_genexpr(x):
    return max(t.sum() for t in [x, x * 2])


def min_of_genexpr(x):
    return min(t.sum() for t in [x, x * 2])


def sorted_of_genexpr(x):
    return sorted(t.sum() for t in [x, x * 3, x * 2])


def max_of_iter(x):
    return max(iter([x.sum(), x.sum() * 2]))


def any_of_genexpr(x):
    return any(t.sum() > 3 for t in [x, x * 2])


@pytest.mark.parametrize("fn", [max_of_genexpr, min_of_genexpr, sorted_of_genexpr, max_of_iter, any_of_genexpr])
def test_builtin_that_breaks_sees_the_whole_iterator(fn):
    # The builtin compares tensors (a break); the iterator it had drained
    # while tracing must be whole again when the call reruns for real.
    check_like_eager(fn, torch.ones(2))


# ---- inlined functions whose code or defaults are replaced ---------------------------------


def helper(x):
    return x + 1


def scaled(x, k=2):
    return x * k


def calls_helpers(x):
    return helper(x) + scaled(x)


def recompiles(compiled):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e["guard"] for e in handle._events() if e["kind"] == "recompile"]


def test_replaced_code_of_an_inlined_function_recompiles(monkeypatch):
    def times_ten(x):
        return x * 10

    x = torch.ones(2)
    compiled = check_like_eager(calls_helpers, x)
    monkeypatch.setattr(helper, "__code__", times_ten.__code__)
    check_like_eager(calls_helpers, x)  # a fresh compile agrees...
    assert torch.equal(compiled(x), calls_helpers(x))  # ...and so does the cached one
    (guard,) = recompiles(compiled)
    assert "__code__" in guard, guard
    monkeypatch.setattr(scaled, "__defaults__", (5,))
    assert torch.equal(compiled(x), calls_helpers(x))
    assert "__defaults__" in recompiles(compiled)[-1]
    for _ in range(2):  # nothing changed since: no more recompiles
        compiled(x)
    assert len(recompiles(compiled)) == 2


class WithMethod(torch.nn.Module):
    def forward(self, x):
        return self.step(x)

    def step(self, x):
        return x + 1


def test_replaced_code_of_an_inlined_method_recompiles(monkeypatch):
    def step_times_100(self, x):
        return x * 100

    model, x = WithMethod(), torch.ones(2)
    compiled = ptc.compile(model, backend="eager")
    assert torch.equal(compiled(x), model(x))
    monkeypatch.setattr(WithMethod.step, "__code__", step_times_100.__code__)
    assert torch.equal(compiled(x), model(x))


def test_nested_function_made_per_call_compiles_once():
    # A nested function's defaults are new objects on each call: guarded by
    # value, so its inlining guards do not recompile every call.
    def f(x):
        def inner(y, k=3, *, m=2):
            return y * k + m

        return inner(x)

    compiled = check_like_eager(f, torch.ones(2), calls=3)
    assert not recompiles(compiled)


# ---- containers changed while they are iterated --------------------------------------------


def dict_grows_in_loop(x):
    d = {"a": 1}
    for k in d:
        d["b"] = 2
    return x + 1


def set_grows_in_loop(x):
    s = {1}
    for v in s:
        s.add(2)
    return x + 1


def dict_shrinks_in_items_loop(x):
    d = {"a": 1, "b": 2}
    for k, v in d.items():
        if k == "b":
            del d["a"]
    return x + v


def dict_grows_after_a_break(x):
    d = {"a": 1, "b": 2}
    seen = []
    for k in d:
        print(k)  # a break inside the loop: the iterator is rebuilt after it
        seen.append(k)
        if k == "a":
            d["c"] = 3
    return x + 1, seen


def outside_dict_grows_in_loop(x, d):
    for k in d:
        d[k + "x"] = 1
    return x + 1


def dict_values_replaced_in_loop(x):
    d = {"a": x, "b": x}
    for k in d:
        d[k] = d[k] * 2  # same size: allowed
    return d["a"] + d["b"]


def list_changed_in_loop(x):
    items, seen = [1, 2, 3], []
    for v in items:
        seen.append(v)
        if v == 1:
            items.append(4)
        if v == 2:
            items.pop(0)
    return x + 1, seen, items


@pytest.mark.parametrize("fn", [dict_grows_in_loop, set_grows_in_loop, dict_shrinks_in_items_loop,
                                dict_grows_after_a_break, dict_values_replaced_in_loop, list_changed_in_loop])
def test_container_changed_while_iterated(fn, capsys):
    check_like_eager(fn, torch.ones(2))
    out = capsys.readouterr().out
    assert out == "a\n" * 4 or fn is not dict_grows_after_a_break, out  # 2 eager + 2 ptc calls


def test_outside_dict_changed_while_iterated():
    want = outcome(outside_dict_grows_in_loop, torch.ones(2), {"a": 1})
    got = outcome(ptc.compile(outside_dict_grows_in_loop, backend="eager"), torch.ones(2), {"a": 1})
    assert want == got == ("raise", RuntimeError, "dictionary changed size during iteration")


# ---- functions marked torch.compiler.disable / torch._dynamo.disable ------------------------


@torch.compiler.disable
def disabled_by_decorator(x):
    print("eager", x.sum().item())  # would be breaks if it were traced
    return x.tolist()


def _scaled_eagerly(x):
    return x * float(x.sum())


disabled_by_call = torch._dynamo.disable(_scaled_eagerly)


@torch._dynamo.disable(recursive=False)
def disabled_not_recursively(x):
    return _scaled_eagerly(x) - 1


def calls_disabled(x):
    y = x + 1
    a = disabled_by_decorator(y)
    b = disabled_by_call(y)
    return y * 2 + b, a


def calls_disabled_not_recursively(x):
    y = x + 1
    return disabled_not_recursively(y) * 2


@pytest.mark.parametrize("fn", [calls_disabled, calls_disabled_not_recursively])
def test_torch_disabled_function_runs_as_one_eager_call(fn, capsys):
    check_like_eager(fn, torch.ones(2))
    out = capsys.readouterr().out
    assert out.count("eager 4.0") == (4 if fn is calls_disabled else 0), out
    report = ptc.explain(fn)(torch.ones(2))
    # One break per disabled call, none from inside the wrappers or the functions.
    codes = [b["code"] for b in report.breaks]
    assert codes == ["PTC-B014"] * (2 if fn is calls_disabled else 1), report.breaks
    assert "is marked torch.compiler.disable" in report.breaks[0]["detail"], report.breaks[0]


def test_torch_disabled_graph_count_matches_torch_compile():
    dynamo = pytest.importorskip("torch._dynamo")
    torch._dynamo.reset()
    theirs = dynamo.explain(calls_disabled)(torch.ones(2))
    ours = ptc.explain(calls_disabled)(torch.ones(2))
    assert ours.graph_count == theirs.graph_count == 2


# ---- torch.manual_seed inside the compiled function -----------------------------------------


def seeded_rand(x):
    torch.manual_seed(123)
    return x + torch.rand(3)


def seeded_dropout_and_randn_like(x):
    torch.manual_seed(7)
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    return y + torch.randn_like(y)


@pytest.mark.parametrize("backend", ["ptc", "eager"])
@pytest.mark.parametrize("fn", [seeded_rand, seeded_dropout_and_randn_like])
def test_manual_seed_gives_eager_values_on_every_call(fn, backend):
    # Equal bit for bit: after the seed, random ops run in torch.
    check_like_eager(fn, torch.zeros(3), backend=backend, calls=3)


# ---- exceptions raised inside the compiled function: chaining ------------------------------


def raise_from(x):
    try:
        raise ValueError("inner")
    except ValueError as e:
        raise KeyError("outer") from e


def raise_from_none(x):
    try:
        raise ValueError("inner")
    except ValueError:
        raise KeyError("outer") from None


def raise_in_except(x):
    y = x + 1
    try:
        {}["missing"]
    except KeyError:
        raise RuntimeError("while handling %d" % y.numel())


def chain_of(exc):
    """The chain as eager shows it: (type, message, cause?, context?, suppress) per link."""
    links = []
    while exc is not None:
        links.append((type(exc), str(exc), exc.__cause__ is not None, exc.__context__ is not None,
                      exc.__suppress_context__, exc.__cause__ is exc.__context__))
        exc = exc.__cause__ or exc.__context__
    return links


@pytest.mark.parametrize("fn", [raise_from, raise_from_none, raise_in_except])
def test_exception_chaining_matches_eager(fn):
    compiled = ptc.compile(fn, backend="eager")
    for _ in range(2):
        with pytest.raises(Exception) as want:
            fn(torch.ones(2))
        with pytest.raises(Exception) as got:
            compiled(torch.ones(2))
        assert chain_of(got.value) == chain_of(want.value)


def test_exception_chaining_inside_a_caller_handler():
    # Raised with no traced handler active: the caller's handled exception
    # is the context, as in eager.
    compiled = ptc.compile(lambda x: x.view(-1)[10], backend="eager")
    try:
        raise LookupError("caller's")
    except LookupError:
        with pytest.raises(IndexError) as got:
            compiled(torch.ones(2))
    assert isinstance(got.value.__context__, LookupError)


# ---- exceptions raised inside the compiled function: tracebacks -----------------------------


def _raises_key_error(y):
    raise KeyError("outer %d" % y.numel())


def raise_in_inlined_helper_inside_except(x):
    y = x + 1
    try:
        raise ValueError("inner")
    except ValueError:
        _raises_key_error(y)


def _bad_matmul(a):
    return a @ torch.ones(5)


def _calls_bad_matmul(a):
    return _bad_matmul(a * 2) + 1


def op_error_two_helpers_deep(x):
    return _calls_bad_matmul(x.sin())


def index_error_after_a_break(x):
    y = x * 2
    print(end="")  # a break: the raise runs in the next segment
    return y.view(-1)[100]


def frames_of(exc):
    """Where each traceback entry of exc points, caret columns included; the
    first entry of the one raised to the caller is the caller's own."""
    return [(s.filename, s.name, s.lineno, s.end_lineno, s.colno, s.end_colno, s.line)
            for s in traceback.extract_tb(exc.__traceback__)]


def raised(fn, x):
    try:
        fn(x)
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return e
    raise AssertionError("%s did not raise" % fn.__name__)


@pytest.mark.parametrize("backend", ["ptc", "eager"])
@pytest.mark.parametrize("fn", [raise_in_inlined_helper_inside_except, op_error_two_helpers_deep,
                                index_error_after_a_break, raise_from, raise_from_none, raise_in_except])
def test_traceback_reads_as_eager(fn, backend):
    """The compiled function's own frame and the frames inlined into it are in
    the traceback at eager's lines and columns, and so are those of the
    exceptions it chains to (they lacked every frame but the caller's)."""
    compiled = ptc.compile(fn, backend=backend)
    for _ in range(2):  # the call that compiles, then one from the cache
        want, got = raised(fn, torch.ones(2)), raised(compiled, torch.ones(2))
        assert len(frames_of(want)) >= 2  # the caller's and fn's at least
        while want is not None:
            assert type(got) is type(want) and str(got) == str(want)
            assert frames_of(got) == frames_of(want)
            want, got = want.__cause__ or want.__context__, got.__cause__ or got.__context__
        assert got is None


def test_a_raise_out_of_an_except_clause_breaks_at_its_place():
    """Every break has a place: a raise that leaves an except clause breaks at
    the clause's cleanup re-raise, which has no source line (the break read
    file:0:0 with no text); it is placed where the exception came from, as
    eager's traceback places it."""
    compiled = ptc.compile(raise_in_inlined_helper_inside_except)
    with pytest.raises(KeyError):
        compiled(torch.ones(2))
    (b,) = ptc.ExplainOutput(list(compiled._events()), None).breaks
    lines, first = inspect.getsourcelines(raise_in_inlined_helper_inside_except)
    at = next(i for i, text in enumerate(lines) if "_raises_key_error(y)" in text)
    assert (b["code"], b["line"], b["col"], b["text"].strip()) == \
        ("PTC-B013", first + at, lines[at].index("_raises") + 1, "_raises_key_error(y)")
    assert b["stack"].endswith(":%d)" % (first + at)), b["stack"]


# ---- a user's TorchFunctionMode around a compiled call --------------------------------------


class RecordingMode(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def sin_plus_one(x):
    return torch.sin(x) + 1


@pytest.mark.parametrize("backend", ["ptc", "eager"])
def test_torch_function_mode_sees_what_eager_shows(backend):
    compiled = ptc.compile(sin_plus_one, backend=backend)
    x = torch.ones(3)
    compiled(x)  # compiled and cached before the mode is entered
    want, got = RecordingMode(), RecordingMode()
    with want:
        expected = sin_plus_one(x)
    with pytest.warns(RuntimeWarning, match="TorchFunctionMode is active"):
        with got:
            result = compiled(x)
    assert torch.equal(result, expected)
    assert got.seen == want.seen == ["sin", "add"]
    with got:  # one warning per compiled function
        compiled(x)
    assert torch.equal(compiled(x), expected)  # compiled again once the mode is gone


def mode_entered_inside(x):
    mode = RecordingMode()
    y = x * 2
    with mode:
        z = torch.sin(y) + 1
    return z - 1, mode.seen


@pytest.mark.parametrize("backend", ["ptc", "eager"])
def test_torch_function_mode_entered_inside_sees_what_eager_shows(backend):
    # entered after a graph, the mode sees the torch calls of the rest of
    # the call run for real, as in eager (main: ptc's own __get__ and
    # stride calls, and not the graph's sin and add)
    compiled = ptc.compile(mode_entered_inside, backend=backend)
    for call in range(2):
        want = mode_entered_inside(torch.ones(3))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(torch.ones(3))
        said = [str(w.message) for w in caught if "TorchFunctionMode is active" in str(w.message)]
        assert len(said) == (1 if call == 0 else 0)  # once per compiled function
        assert torch.equal(got[0], want[0]) and got[1] == want[1] == ["sin", "add"]


# ---- objects the trace makes ----------------------------------------------


class Made:
    pass


def counts(compiled):
    ex = ptc.ExplainOutput(list(getattr(compiled, "_ptc_compiled", compiled)._events()), None)
    return ex.graph_count, ex.break_count, [b["detail"] for b in ex.breaks]


def closure_over_a_value_from_a_break(x):
    # main: the closure read its cell before the graph's write of it was
    # replayed: a NameError in the trace, a second break
    n = x.sum().item()
    g = lambda: n * 2  # noqa: E731
    return x + g(), g()


def test_closure_cell_written_after_a_break():
    compiled = check_like_eager(closure_over_a_value_from_a_break, torch.ones(2))
    assert counts(compiled) == (2, 1, ["Tensor.item"])


WEAK = {}


def keeps_a_weak_reference(x):
    # main: an internal error (a weakref was a value ptc cannot rebuild)
    import weakref

    a = Made()
    WEAK["a"] = weakref.ref(a)
    WEAK["keep"] = a
    return x * 2


def test_weak_reference_to_an_object_made_in_the_trace():
    compiled = ptc.compile(keeps_a_weak_reference, backend="eager", fullgraph=True)
    for _ in range(2):
        WEAK.clear()
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))
        assert WEAK["a"]() is WEAK["keep"] and type(WEAK["keep"]) is Made
    assert counts(compiled) == (1, 0, [])


# ---- a builtin consuming an object with a Python __iter__ ---------------------------------


class Mapping(__import__("collections.abc").abc.MutableMapping):
    def __init__(self):
        self.d = {}

    def __getitem__(self, k):
        return self.d[k]

    def __setitem__(self, k, v):
        self.d[k] = v

    def __delitem__(self, k):
        del self.d[k]

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)


def list_of_a_mapping(x):
    # main: list(m) returned m.__iter__()'s iterator, or crashed (the __iter__ frame was
    # left on the stack at a break)
    m = Mapping()
    m["a"] = x
    return list(m), x + 1


def update_of_a_mapping(x):
    # main: a segmentation fault
    m = Mapping()
    m["a"] = x
    m.update(b=2)
    return m["a"] * len(m), list(m), sorted(m)


@pytest.mark.parametrize("fn", [list_of_a_mapping, update_of_a_mapping])
def test_builtin_runs_a_python_iter(fn):
    compiled = check_like_eager(fn, torch.ones(2))
    assert counts(compiled) == (1, 0, [])


# ---- mutable default arguments of an inlined helper ------------------------------------------


def appended(v, acc=[]):  # noqa: B006 - the mutable default is what is tested
    acc.append(v)
    return len(acc)


def counted(k, seen={}):  # noqa: B006
    seen[k] = seen.get(k, 0) + 1
    return seen[k]


def kw_only_counted(k, *, seen={}):  # noqa: B006
    seen[k] = seen.get(k, 0) + 1
    return seen[k]


def appends_to_a_default_list(x):
    return x + appended(1)


def counts_in_a_default_dict(x):
    return x * counted("a")


def counts_in_a_kw_only_default(x):
    return x * kw_only_counted("a")


def default_state():
    return (appended.__defaults__[0], counted.__defaults__[0],
            kw_only_counted.__kwdefaults__["seen"])


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("fn", [appends_to_a_default_list, counts_in_a_default_dict,
                                counts_in_a_kw_only_default])
def test_mutated_default_keeps_each_call_s_write(fn, fullgraph):
    # main: the default list or dict was a constant of the trace: written once, while
    # tracing, and never again; every later call returned the first call's value
    # (x + 1 for ever, where eager gives x + 1, x + 2, ...)
    compiled = ptc.compile(fn, backend="eager", fullgraph=fullgraph)
    for state in default_state():
        state.clear()
    want = [fn(torch.zeros(2)) for _ in range(3)], [s.copy() for s in default_state()]
    for state in default_state():
        state.clear()
    got = [compiled(torch.zeros(2)) for _ in range(3)], [s.copy() for s in default_state()]
    assert same(want[0], got[0]) and want[1] == got[1], (want, got)
    assert counts(compiled)[1] == 0


# ---- type(obj) of an object from outside -----------------------------------------------------


class Counter:
    n = 0
    scale = 2

    def bump(self):
        type(self).n += 1
        return self.n


def bumps_through_type_of_an_argument(x, obj):
    type(obj).n += 1
    return x + 1


def bumps_twice_in_a_method(x, obj):
    a = obj.bump()
    return x + obj.bump(), a


def reads_a_class_attribute_through_type(x, obj):
    return x * type(obj).scale


@pytest.mark.parametrize("fn", [bumps_through_type_of_an_argument, bumps_twice_in_a_method,
                                reads_a_class_attribute_through_type])
def test_type_of_an_outside_object_is_outside(fn):
    # main: type(obj) had no source, so its class was a constant of the trace: the
    # write type(obj).n += 1 was made once, while tracing (later calls left n alone,
    # or a second write in the same call was made twice), and a read of
    # type(obj).scale was not guarded (a changed class attribute kept the old value)
    compiled = ptc.compile(fn, backend="eager")
    for scale in (2, 2, 3):
        results = []
        for f in (fn, compiled):
            Counter.n, Counter.scale = 0, scale
            results.append((outcome(f, torch.ones(2), Counter()), Counter.n))
        (want, want_n), (got, got_n) = results
        assert want[0] == got[0] and same(want[1:], got[1:]) and want_n == got_n, results
