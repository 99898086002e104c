"""numpy interop under ptc.compile (issue 13 part 3).

numpy scalars (np.float32(2.0), np.int64(3), np.bool_(True)) are constants
guarded on type and value, and as operands of tensors the Python number
torch reads them as, so results keep eager's dtype. Each program runs
eagerly and under ptc.compile(backend="eager"): values, dtypes and types must
agree, and the first call gives the pinned graph and break counts (those of
torch.compile(backend="eager"), measured with torch 2.11).
"""
import re
import warnings

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import ptc  # noqa: E402

SCALARS = [np.float32(1.1), np.float16(2.5), np.float64(1.5), np.int64(3), np.int32(-2),
           np.uint8(7), np.bool_(True)]
TENSORS = [torch.float32, torch.float16, torch.int32, torch.int64]


def described(v):
    """What a comparison with eager looks at: type, dtype and values."""
    if isinstance(v, (tuple, list)):
        return type(v).__name__, [described(i) for i in v]
    if isinstance(v, torch.Tensor):  # repr: -0.0 and nan as themselves
        return "Tensor", str(v.dtype), repr(v.tolist())
    return type(v).__name__, repr(v)


def counts(compiled):
    ex = ptc.ExplainOutput(list(compiled._events()), None)
    return ex.graph_count, ex.break_count


def operators(x, s):
    return x + s, s + x, x - s, s - x, x * s, s * x, x / s, s / x, x ** 2 * s, x < s, s >= x


@pytest.mark.parametrize("dtype", TENSORS, ids=str)
@pytest.mark.parametrize("s", SCALARS, ids=lambda s: type(s).__name__)
def test_numpy_scalar_operands_keep_eagers_dtype(s, dtype):
    x = torch.arange(1, 5).to(dtype)
    compiled = ptc.compile(operators, backend="eager", fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ptc warning
        assert described(compiled(x, s)) == described(operators(x, s))
    assert counts(compiled) == (1, 0)


def calls(x):
    return (torch.full((2,), np.float32(2.5)), x.clamp(min=np.float32(0.5)), x.pow(np.int64(2)),
            torch.add(x, np.int64(3), alpha=np.float32(2.0)), x.sum(np.int64(0)),
            x.view(np.int64(-1)))


def test_numpy_scalars_as_torch_call_arguments():
    x = torch.arange(4.0)
    compiled = ptc.compile(calls, backend="eager", fullgraph=True)
    assert described(compiled(x)) == described(calls(x))
    assert counts(compiled) == (1, 0)


def test_a_numpy_scalar_argument_is_guarded_on_its_value_and_type():
    """main: np.float64 (a float subclass) was guarded on its type only, so
    the second call returned the first one's result; np.float32 broke
    (PTC-B022)."""
    def f(x, s):
        return x * s

    compiled = ptc.compile(f, backend="eager")
    x = torch.ones(2)
    for s in (np.float64(2.0), np.float64(3.0), np.float32(3.0), np.int64(3)):
        assert described(compiled(x, s)) == described(f(x, s))
    recompiles = [e["guard"] for e in compiled._events() if e["kind"] == "recompile"]
    assert len(recompiles) == 3 and "L['s'] == np.float64(2.0)" in recompiles[0]
    assert [e for e in compiled._events() if e["kind"] == "break"] == []


SCALE = np.float32(2.0)


def scaled(x):
    return x * SCALE


def test_a_numpy_scalar_global_is_guarded_on_its_value():
    global SCALE
    compiled = ptc.compile(scaled, backend="eager")
    x = torch.ones(2)
    try:
        assert compiled(x).tolist() == [2.0, 2.0]
        SCALE = np.float32(5.0)
        assert compiled(x).tolist() == [5.0, 5.0]
    finally:
        SCALE = np.float32(2.0)


def test_a_numpy_scalar_made_inside_the_function():
    def f(x):
        return x * np.float32(1.5) + np.int64(2) * x

    compiled = ptc.compile(f, backend="eager", fullgraph=True)
    x = torch.arange(3, dtype=torch.int32)
    assert described(compiled(x)) == described(f(x))
    assert counts(compiled) == (1, 0)


def test_a_number_divided_by_a_tensor_rounds_as_eager():
    """Eager's `2.5 / x` is x.reciprocal() * 2.5; main divided once, which
    differs in the last bit (2.5 / 3 in float32)."""
    def f(x):
        return 2.5 / x, 7 / x.int(), np.float32(1.1) / x.half()

    x = torch.arange(1.0, 9.0)
    compiled = ptc.compile(f, backend="eager", fullgraph=True)
    assert described(compiled(x)) == described(f(x))


# ---- torch.from_numpy of arrays from outside the graph ---------------------------


def add_array(x, a):
    return x + torch.from_numpy(a)


def test_from_numpy_of_an_argument_is_a_graph_input():
    """Each call's array, not the first one's; a new dtype recompiles
    (main: a break, PTC-B007; torch.compile: one graph)."""
    compiled = ptc.compile(add_array, fullgraph=True)
    a = np.ones(3, dtype=np.float32)
    x = torch.zeros(3)
    assert compiled(x, a).tolist() == [1.0] * 3
    assert counts(compiled) == (1, 0)
    a[:] = 7
    assert compiled(x, a).tolist() == [7.0] * 3
    assert compiled(x, np.arange(3, dtype=np.float32)).tolist() == [0.0, 1.0, 2.0]
    assert described(compiled(x, np.arange(3))) == described(add_array(x, np.arange(3)))
    recompiles = [e["guard"] for e in compiled._events() if e["kind"] == "recompile"]
    assert len(recompiles) == 1 and recompiles[0].startswith("torch.from_numpy(L['a'])")


ARRAY = np.ones((2, 3), dtype=np.float32)


def scale_by_global_array(x):
    return x * torch.from_numpy(ARRAY)


def test_from_numpy_of_a_global_reads_it_on_every_call():
    compiled = ptc.compile(scale_by_global_array, backend="eager", fullgraph=True)
    x = torch.full((2, 3), 2.0)
    try:
        assert compiled(x).tolist() == [[2.0] * 3] * 2
        ARRAY[1] = 5
        assert compiled(x).tolist() == [[2.0] * 3, [10.0] * 3]
    finally:
        ARRAY[1] = 1


def write_through_from_numpy(x, a):
    t = torch.from_numpy(a)
    t.mul_(2)
    return x + t, t.sum()


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("columns", [False, True], ids=["whole", "strided"])
def test_in_place_writes_through_from_numpy_reach_the_array(backend, columns):
    def arrays():
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        return a[:, 1] if columns else a

    compiled = ptc.compile(write_through_from_numpy, backend=backend, fullgraph=True)
    a, b = arrays(), arrays()
    x = torch.ones(a.shape)
    want = write_through_from_numpy(x, a)
    assert described(compiled(x, b)) == described(want) and b.tolist() == a.tolist()
    assert described(compiled(x, b)) == described(write_through_from_numpy(x, a))
    assert b.tolist() == a.tolist()
    assert counts(compiled) == (1, 0)


def numpy_of_input_then_write(x):
    a = x.numpy()  # a traced array sharing x's memory (test_capture_numpy_traced.py)
    t = torch.from_numpy(a)
    t.add_(1)
    return x * 2


def test_from_numpy_of_an_input_s_array_keeps_eagers_aliasing():
    """t shares x's memory: the write through t is seen by x * 2, in one
    graph (main broke twice: PTC-B003 at .numpy(), PTC-B012 at the write)."""
    x, y = torch.ones(2), torch.ones(2)
    compiled = ptc.compile(numpy_of_input_then_write, backend="eager")
    assert compiled(x).tolist() == numpy_of_input_then_write(y).tolist() == [4.0, 4.0]
    assert x.tolist() == y.tolist() == [2.0, 2.0]
    assert counts(compiled) == (1, 0)


def test_from_numpy_of_a_read_only_array_runs_for_real_with_eagers_warning():
    a = np.ones(2, dtype=np.float32)
    a.flags.writeable = False
    compiled = ptc.compile(add_array, backend="eager")
    with pytest.warns(UserWarning, match="not writable"):
        assert compiled(torch.zeros(2), a).tolist() == [1.0, 1.0]
    codes = [e["break"]["code"] for e in compiled._events() if e.get("break")]
    assert codes == ["PTC-B007"]


def test_from_numpy_of_an_unsupported_dtype_raises_eagers_error():
    compiled = ptc.compile(add_array, backend="eager")
    with pytest.raises(TypeError, match="can't convert np.ndarray of type numpy.str_"):
        compiled(torch.zeros(2), np.array(["a", "b"]))


def tensor_of_array(x, a):
    return x + torch.tensor(a)


def tensor_of_array_written(x, a):
    t = torch.tensor(a)  # a copy: the write stays in t
    t.add_(1)
    return x + t


def as_tensor_of_array_written(x, a):
    t = torch.as_tensor(a)  # a's memory: the write reaches a
    t.add_(1)
    return x + t


def as_tensor_of_array_converted(x, a):
    t = torch.as_tensor(a, dtype=torch.float64)  # a copy
    t.add_(1)
    return x + t


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("fn", [tensor_of_array, tensor_of_array_written, as_tensor_of_array_written,
                                as_tensor_of_array_converted], ids=lambda f: f.__name__)
def test_tensor_and_as_tensor_of_an_array_copy_or_share_as_eager(fn, backend):
    """main: a break (PTC-B007); torch.compile: one graph, no break."""
    a, b = np.arange(3, dtype=np.float32), np.arange(3, dtype=np.float32)
    compiled = ptc.compile(fn, backend=backend, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: eager gives none
        assert described(compiled(torch.ones(3), b)) == described(fn(torch.ones(3), a))
    assert b.tolist() == a.tolist()
    assert counts(compiled) == (1, 0)


# ---- tensor operators with an array -----------------------------------------------


def array_operators(x, a):
    return x + a, x - a, x * a, x / a, x // a, x == a, a == x, x != a


def in_place_operator_with_an_array(x, a):
    y = x
    y += a  # Tensor.__iadd__ returns NotImplemented: y = y + a, x unchanged
    return x, y


ARRAYS = [np.array([2.0, -3.0, 0.5]), np.array([2.0, -3.0, 0.5], dtype=np.float32),
          np.array([2, -3, 1]), np.array([2, -3, 1], dtype=np.int32), np.array([True, False, True]),
          np.array(1.5), np.array([2.0, -3.0, 0.5], dtype=np.float16)]
OPERAND_TENSORS = [torch.float32, torch.float64, torch.int64, torch.int32, torch.float16]


@pytest.mark.parametrize("dtype", OPERAND_TENSORS, ids=str)
@pytest.mark.parametrize("a", ARRAYS, ids=lambda a: "%s%d" % (a.dtype, a.ndim))
@pytest.mark.parametrize("fn", [array_operators, in_place_operator_with_an_array], ids=lambda f: f.__name__)
def test_tensor_operators_with_an_array_are_numpys(fn, a, dtype):
    """Eager's x + a is numpy's add on x.numpy(), wrapped back as a tensor:
    numpy's dtypes (float32 tensor + int64 array is float64). main: x == a
    was False (a silent wrong result), the rest a break (PTC-B022)."""
    x = torch.tensor([4.0, 5.0, -7.0]).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 2 on Tensor.__array_wrap__
        want = described(fn(x.clone(), a))
        compiled = ptc.compile(fn, backend="eager", fullgraph=True)
        assert described(compiled(x.clone(), a)) == want
    assert counts(compiled) == (1, 0)


def test_operators_eager_runs_through_numpy_s_errors_run_for_real():
    """a tensor that requires grad (x.numpy() raises), ** and @ (numpy's
    kernels round otherwise than torch's), % (numpy's zero takes the
    divisor's sign), comparisons but == (both sides refuse): each runs for
    real, eager's result or error."""
    def f(x, a):
        return x ** a

    def g(x, a):
        return x < a

    def h(x, a):
        return x % a

    a = np.array([1.5, 2.0])
    for fn, x in ((f, torch.tensor([2.0, 3.0])), (f, torch.tensor([2.0, 3.0], requires_grad=True)),
                  (g, torch.tensor([2.0, 3.0])), (h, torch.tensor([-3.0, 3.0]))):
        compiled = ptc.compile(fn, backend="eager")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                want = described(fn(x, a))
            except (TypeError, RuntimeError) as e:
                with pytest.raises(type(e), match=re.escape(str(e))):
                    compiled(x, a)
            else:
                assert described(compiled(x, a)) == want
        assert counts(compiled)[1] == 1
