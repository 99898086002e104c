"""numpy interop under ptc.compile (issue 13 part 3).

numpy scalars (np.float32(2.0), np.int64(3), np.bool_(True)) are constants
guarded on type and value, and as operands of tensors the Python number
torch reads them as, so results keep eager's dtype. Each program runs
eagerly and under ptc.compile(backend="eager"): values, dtypes and types must
agree, and the first call gives the pinned graph and break counts (those of
torch.compile(backend="eager"), measured with torch 2.11).
"""
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
    if isinstance(v, torch.Tensor):
        return "Tensor", str(v.dtype), v.tolist()
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
