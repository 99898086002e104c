"""Every graph-break kind of ptc's taxonomy (PTC-B001 ... PTC-B027).

For each code there is a program that hits it: compiled, it must behave
exactly as eager (results or exceptions, printed text, mutations, module and
global state, twice in a row) and report that code with its reason,
explanation and hint from the table; with fullgraph=True the same program
raises GraphBreakError naming the code, the source line and a caret. The man
page documents every code.
"""
import copy
import gc
import importlib
import operator
import os
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import ptc  # noqa: E402
import capture_programs as P  # noqa: E402
from test_capture_programs import compare, counts  # noqa: E402
from ptc._split import graph_split  # noqa: E402

T = P.T
x34 = lambda: (T(3, 4),)


def b001(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    return y * 3


def b002(x):
    v = (x * 2).sum().item()
    return x + v


def b003(x):
    return (x * 2).tolist()


def b004(x):
    s = str(x.sum())
    return s, x + 1


def b005(x):
    y = x * 2
    print("y has shape", tuple(y.shape))
    return y + 1


def b006(x):
    y = x * 2
    z = copy.deepcopy([1, 2])
    return y + len(z)


def b007(x):
    y = x * 2
    return torch.logcumsumexp(y, dim=1) + 1


def b008(x):
    idx = torch.nonzero(x > 0)
    return idx * 2


def b009(x, out):
    y = x + 1
    out.append(y.sum())  # logged and replayed after the graph: no break
    out.sort(key=lambda t: -t)  # keys that are tensor values: the order needs the data
    return y * 2


TEMP = 0


def b011(x):
    global TEMP
    y = x * 2
    TEMP = 1  # logged and replayed after the graph: no break
    del TEMP
    try:
        y = y + TEMP  # read after the delete: the read runs for real
    except NameError:
        TEMP = 0
    return y + 1


class B010(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("last", torch.zeros(3, 4))

    def forward(self, x):
        y = x * 2
        self.last = y.detach()  # a registered buffer is replaced
        return y + 1


def b012(x):
    y = x * 2
    x.t().reshape(-1)[:2].add_(1)  # a write through a reshape that copies (eager: x unchanged)
    return x + y


def b013(x):
    y = x * 2
    if y.dim() == 2:
        raise ValueError("two dims: %d" % y.dim())
    return y


@ptc.disable
def _eager_only(t):
    return t * 10


def b014(x):
    y = x + 1
    return _eager_only(y) - 1


def _gen(n):
    try:  # left unfinished below: CPython runs the finally when it frees it
        for i in range(n):
            yield i
    finally:
        pass


def b015(x):
    for i in _gen(3):
        return x * i


def b016(x):
    import contextlib
    y = x * 2
    with contextlib.suppress(KeyError):
        y = y + 1
    return y * 3


def b017(x):
    y = x * 2  # a traced tensor, which the class body reads

    class Local:
        t = y + 1
    return Local.t * 3, Local.__name__


def _rec(t, n):
    return t if n == 0 else _rec(t * 2, n - 1)


def b018(x):
    return _rec(x, 6) + 1


def b019(x):
    y = (x * 2).sum()
    y.backward()
    return x.grad * 1


def b021(x, it):
    total = x * 0
    for v in it:
        total = total + v
    return total


def b022(x):
    y = x * 2
    return y + torch.ones(5)


class MyTensor(torch.Tensor):
    pass


def b023(x):
    return x * 2 + 1


def b024(x):
    y = x * 2
    y.requires_grad = True
    return (y + 1).requires_grad, (y + 1).detach()


def _handler(t):
    try:
        raise KeyError("k")
    except KeyError:
        print("in the handler")  # a break inside an except block of an inlined call
        return t * 2


def b025(x):
    return _handler(x + 1) + 1


def b026(x):
    y = x * 2
    c = torch.fft.rfft(y)
    return c.abs() + 1


def b027(x):
    y = x * 2
    graph_split("a split ptc asks for")  # ptc's own: no-op when run
    return y + 1


def _prog(fn, args, graphs, breaks, codes, module=None):
    return P.Program(fn, args, graphs, breaks, codes, module=module, name=(fn or module).__name__)


# code -> (program, the codes all its breaks report)
CASES = {
    "PTC-B001": _prog(b001, x34, 2, 1, ["PTC-B001"]),
    "PTC-B002": _prog(b002, x34, 2, 1, ["PTC-B002"]),
    "PTC-B003": _prog(b003, x34, 1, 1, ["PTC-B003"]),
    "PTC-B004": _prog(b004, x34, 2, 1, ["PTC-B004"]),
    "PTC-B005": _prog(b005, x34, 2, 1, ["PTC-B005"]),
    "PTC-B006": _prog(b006, x34, 2, 1, ["PTC-B006"]),
    "PTC-B007": _prog(b007, x34, 2, 1, ["PTC-B007"]),
    "PTC-B008": _prog(b008, x34, 2, 1, ["PTC-B008"]),
    "PTC-B009": _prog(b009, lambda: (T(3, 4), []), 2, 1, ["PTC-B009"]),
    "PTC-B010": _prog(None, x34, 2, 1, ["PTC-B010"], module=B010),
    "PTC-B011": _prog(b011, x34, 2, 1, ["PTC-B011"]),
    "PTC-B012": _prog(b012, x34, 2, 1, ["PTC-B012"]),
    "PTC-B013": _prog(b013, x34, 1, 1, ["PTC-B013"]),
    "PTC-B014": _prog(b014, x34, 2, 1, ["PTC-B014"]),
    "PTC-B015": _prog(b015, x34, 1, 3, ["PTC-B015", "PTC-B021"]),
    "PTC-B016": _prog(b016, x34, 2, 1, ["PTC-B016"]),
    "PTC-B017": _prog(b017, x34, 2, 1, ["PTC-B017"]),
    "PTC-B018": _prog(b018, x34, 2, 1, ["PTC-B018"]),
    "PTC-B019": _prog(b019, lambda: (T(3, 4).requires_grad_(),), 2, 2, ["PTC-B019"]),
    # GET_ITER and each of the three next() calls on the outside iterator
    "PTC-B021": _prog(b021, lambda: (T(3, 4), iter([1, 2])), 3, 4, ["PTC-B021"]),
    "PTC-B022": _prog(b022, x34, 1, 1, ["PTC-B022"]),
    "PTC-B023": _prog(b023, lambda: (T(3, 4).as_subclass(MyTensor),), 0, 2, ["PTC-B023"]),
    "PTC-B024": _prog(b024, x34, 2, 1, ["PTC-B024"]),
    # the call runs as its own frame, which cannot trace its except block
    "PTC-B025": _prog(b025, x34, 2, 2, ["PTC-B005", "PTC-B025"]),
    "PTC-B026": _prog(b026, x34, 2, 2, ["PTC-B007", "PTC-B026"]),
    "PTC-B027": _prog(b027, x34, 2, 1, ["PTC-B027"]),
}


@pytest.fixture(autouse=True)
def _state():
    depth = ptc.config.inline_depth
    yield
    ptc.config.inline_depth = depth


def table():
    return {b["code"]: b for b in ptc.break_codes()}


def check_reported(events, code):
    ex = ptc.ExplainOutput(events, None)
    entry = table()[code]
    hits = [b for b in ex.breaks if b["code"] == code]
    assert hits, "%s not reported: %r" % (code, [b["code"] for b in ex.breaks])
    for b in hits:
        for field in ("name", "reason", "explanation", "hint"):
            assert b[field] == entry[field], (code, field)
        assert b["file"] and b["line"] > 0 and b["text"], b


@pytest.mark.parametrize("code", sorted(CASES))
def test_break_behaves_like_eager(code):
    program = CASES[code]
    if code == "PTC-B018":
        ptc.config.inline_depth = 3
    events = compare(program, "eager")
    got = counts(events[0])
    assert got == (program.graphs, program.breaks, program.codes), got
    check_reported(events[0], code)


@pytest.mark.parametrize("code", sorted(CASES))
def test_fullgraph_raises_at_the_break(code):
    program = CASES[code]
    if code == "PTC-B018":
        ptc.config.inline_depth = 3
    target = program.module() if program.module else program.fn
    compiled = ptc.compile(target, backend="eager", fullgraph=True)
    with pytest.raises(ptc.GraphBreakError) as info:
        compiled(*program.args())
    msg = str(info.value)
    first = sorted(program.codes)[0] if code not in program.codes else code
    assert msg.startswith("PTC-B"), msg
    assert "^" in msg and 'File "' in msg and "line" in msg, msg
    if len(program.codes) == 1:
        assert msg.startswith(first), msg


def test_untraceable_frame_names_its_reason(capsys):
    """The frame PTC-B025 runs on its own says why, with no placeholder detail."""
    compiled = ptc.compile(b025, backend="eager")
    compiled(T(3, 4))
    assert capsys.readouterr().out == "in the handler\n"
    why = [e["why"] for e in compiled._events() if e["kind"] == "untraceable"]
    assert why == ["ptc: cannot rebuild state: a break inside an except block"], why


def test_import_break(tmp_path, capsys):
    """PTC-B020: an import that loads a module runs for real, once."""
    name = "ptc_break_import_%d" % os.getpid()
    (tmp_path / (name + ".py")).write_text("print('loading')\nVALUE = 7\n")
    (tmp_path / (name + "_prog.py")).write_text(
        "def f(x):\n    y = x * 2\n    import %s as m\n    return y + m.VALUE\n" % name)
    sys.path.insert(0, str(tmp_path))
    try:
        f = importlib.import_module(name + "_prog").f
        compiled = ptc.compile(f, backend="eager")
        x = T(3, 4)
        got = compiled(x)
        assert capsys.readouterr().out == "loading\n"
        assert torch.equal(got, x * 2 + 7)
        check_reported(compiled._events(), "PTC-B020")
        assert torch.equal(compiled(x), f(x))  # loaded now: no output, same result
        assert capsys.readouterr().out == ""
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
        sys.modules.pop(name + "_prog", None)


def test_every_code_is_tested_and_documented():
    codes = set(table())
    assert codes == set(CASES) | {"PTC-B020"}, sorted(codes ^ (set(CASES) | {"PTC-B020"}))
    man = os.path.join(os.environ.get("PTC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                       "man", "ptc.7")
    text = open(man).read()
    assert "GRAPH BREAKS" in text
    for code, b in table().items():
        assert code in text, code
        assert b["reason"] in text.replace("\\-", "-"), (code, b["reason"])


def test_break_table_is_stable():
    t = ptc.break_codes()
    assert [b["code"] for b in t] == ["PTC-B%03d" % i for i in range(1, len(t) + 1)]
    for b in t:
        assert b["reason"] and b["explanation"] and b["hint"] and b["name"].isupper()


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return (type(e), str(e))


def half_built_tuples():
    """Tuples whose slots were never filled: made by ptc's C code and lost
    on a path that left before filling them (gc.get_referents skips the
    empty slots)."""
    return sum(1 for o in gc.get_objects() if type(o) is tuple and len(gc.get_referents(o)) != len(o))


def call_method_for_real(x):
    y = x + 1
    # operator.call runs for real while tracing: it calls the symbolic
    # method's tp_call with more arguments than ptc's buffer holds
    return operator.call(y.add, *range(70), alpha=1)


def test_a_break_in_a_symbolic_methods_call_leaks_nothing():
    """A Tensor method of a symbolic tensor called for real with more than 64
    arguments breaks (PTC-B006) and fails as eager does, and frees its keyword names."""
    want = outcome(call_method_for_real, T(3))
    before = half_built_tuples()
    for _ in range(2):
        compiled = ptc.compile(call_method_for_real, backend="eager")
        assert outcome(compiled, T(3)) == want
    assert half_built_tuples() == before
    check_reported(compiled._events(), "PTC-B006")



# ---- logging ---------------------------------------------------------------------------

import logging  # noqa: E402

from test_capture_inplace_inputs import counts as compiled_counts  # noqa: E402

_log = logging.getLogger("ptc.test.capture_breaks")


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def logs_a_warning(x):
    y = x * 2
    _log.warning("y has %d rows", y.shape[0])
    return y + 1


def test_a_logger_call_is_one_io_break():
    # main: logging's own code was inlined, and its locks, clocks, thread ids
    # and stream writes were 15 breaks for this one call
    records = _Records()
    _log.addHandler(records)
    _log.propagate = False
    try:
        compiled = ptc.compile(logs_a_warning)
        x = T(3, 4)
        for _ in range(2):
            assert torch.equal(compiled(x), logs_a_warning(x))
    finally:
        _log.removeHandler(records)
    assert records.messages == ["y has 3 rows"] * 4  # compiled and eager, twice each
    graphs, breaks, details = compiled_counts(compiled)
    assert (graphs, breaks) == (2, 1), details
    assert details == ["logging's Logger.warning (runs for real as one call)"]
    handle = getattr(compiled, "_ptc_compiled", compiled)
    assert [b["code"] for b in ptc.ExplainOutput(list(handle._events()), None).breaks] == ["PTC-B005"]
