"""ptc.compile against eager PyTorch on the small programs of capture_programs.py.

Every program runs twice eagerly and twice compiled (the second call is a
cache hit, or a recompile the program's state explains), each time from the
same fresh arguments and global state. Results (or the exception type and
message), printed text, the arguments afterwards (mutations), module state and
the programs' global state must agree; the first compiled call must report the
program's expected graph and break counts and break codes, with no internal
fallback. Backend "eager" runs every program; "reference" and "ptc" run the
programs that capture without breaks.
"""
import contextlib
import dataclasses
import io
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
import capture_programs as P  # noqa: E402

NO_BREAK = [p for p in P.PROGRAMS if p.breaks == 0 and p.graphs > 0 and p.check is None]


def clone(o):
    if isinstance(o, torch.Tensor):
        c = o.detach().clone()
        return c.requires_grad_() if o.requires_grad else c
    if isinstance(o, list):
        return [clone(v) for v in o]
    if isinstance(o, tuple) and not hasattr(o, "_fields"):
        return tuple(clone(v) for v in o)
    if isinstance(o, dict):
        return {k: clone(v) for k, v in o.items()}
    return o


def same(a, b, path="result"):
    """Asserts a and b are the same value (tensors within rounding)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), "%s: %r vs %r" % (path, type(a), type(b))
        assert type(a) is type(b), "%s: %s vs %s" % (path, type(a), type(b))
        assert a.dtype == b.dtype, "%s: dtype %s vs %s" % (path, a.dtype, b.dtype)
        assert a.shape == b.shape, "%s: shape %s vs %s" % (path, tuple(a.shape), tuple(b.shape))
        assert a.requires_grad == b.requires_grad, "%s: requires_grad %s vs %s" % (path, a.requires_grad, b.requires_grad)
        if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
            assert torch.equal(a, b), "%s: values differ" % path
        else:
            tol = 1e-2 if a.dtype in (torch.bfloat16, torch.float16) else 1e-5
            x, y = a.detach().double(), b.detach().double()
            finite = y[torch.isfinite(y)]
            scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
            ok = torch.allclose(x, y, rtol=tol, atol=tol / 10 * scale, equal_nan=True)
            assert ok, "%s: max abs diff %g" % (path, (a.detach().double() - b.detach().double()).abs().max())
        return
    assert type(a) is type(b), "%s: type %s vs %s" % (path, type(a).__name__, type(b).__name__)
    if hasattr(a, "__next__") and iter(a) is a:
        return  # iterators: the same type is all that can be compared without consuming them
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), "%s.%s" % (path, f.name))
    elif isinstance(a, dict):
        assert list(a) == list(b), "%s: keys %s vs %s" % (path, list(a), list(b))
        for k in a:
            same(a[k], b[k], "%s[%r]" % (path, k))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), "%s: length %d vs %d" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (path, i))
    elif isinstance(a, float) and a != a:
        assert b != b, path
    else:
        assert a == b, "%s: %r vs %r" % (path, a, b)


def module_state(m):
    plain = {k: v for k, v in vars(m).items()
             if not k.startswith("_") and isinstance(v, (int, float, str, bool, type(None)))}
    return {"state": {k: v.detach().clone() for k, v in m.state_dict().items()}, "attrs": plain,
            "training": m.training}


def execute(program, backend):
    """Two calls; returns (per-call observations, events after the first, after the second)."""
    P.reset_state()
    torch.manual_seed(0)
    module = program.module() if program.module else None
    target = module if module is not None else program.fn
    events = []
    if backend:
        target = ptc.compile(target, backend=backend)
        handle = getattr(target, "_ptc_compiled", target)
    runs = []
    for call in range(2):
        args = clone(program.args())
        torch.manual_seed(100 + call)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = ("ok", target(*args))
            except Exception as e:  # the exception is the observable result
                result = ("raised", type(e).__name__, str(e))
        ptc_warnings = [str(w.message) for w in caught if str(w.message).startswith("ptc")]
        runs.append({"result": result, "stdout": out.getvalue(), "args": args, "globals": P.snapshot_state(),
                     "module": module_state(module) if module is not None else None, "warnings": ptc_warnings})
        if backend:
            events.append(list(handle._events()))
    return runs, events


def compare(program, backend):
    if program.requires and not program.requires[0]:
        pytest.skip(program.requires[1])
    eager, _ = execute(program, None)
    compiled, events = execute(program, backend)
    for call, (e, c) in enumerate(zip(eager, compiled)):
        where = "%s call %d" % (program.name, call + 1)
        assert not c["warnings"], "%s: ptc warned: %s" % (where, c["warnings"])
        assert e["result"][0] == c["result"][0], "%s: eager %r, compiled %r" % (where, e["result"], c["result"])
        if program.check and e["result"][0] == "ok":
            program.check(e["result"][1], c["result"][1])
        else:
            same(e["result"], c["result"], where + " result")
        assert e["stdout"] == c["stdout"], "%s: printed %r vs %r" % (where, e["stdout"], c["stdout"])
        same(e["args"], c["args"], where + " arguments after the call")
        assert e["globals"] == c["globals"], "%s: globals %r vs %r" % (where, e["globals"], c["globals"])
        if e["module"] is not None:
            same(e["module"], c["module"], where + " module state")
    return events


def counts(events):
    ex = ptc.ExplainOutput(events, None)
    return ex.graph_count, ex.break_count, tuple(sorted({b["code"] for b in ex.breaks}))


@pytest.mark.parametrize("program", P.PROGRAMS, ids=str)
def test_program_eager_backend(program):
    events = compare(program, "eager")
    got = counts(events[0])
    assert got == (program.graphs, program.breaks, program.codes), \
        "%s: (graphs, breaks, codes) %r, expected %r" % (program.name, got, (program.graphs, program.breaks, program.codes))
    if program.breaks == 0:
        # An identical second call is a cache hit: nothing compiles (unless
        # the first call changed state the graph depends on).
        new = [e for e in events[1][len(events[0]):] if e["kind"] == "recompile"]
        assert len(new) == program.recompiles, "%s: the second call recompiled %r" % (program.name, new)


@pytest.mark.parametrize("program", NO_BREAK, ids=str)
def test_program_reference_backend(program):
    compare(program, "reference")


@pytest.mark.parametrize("program", NO_BREAK, ids=str)
def test_program_ptc_backend(program):
    compare(program, "ptc")


def test_program_count():
    assert len(P.PROGRAMS) >= 150, len(P.PROGRAMS)
    names = [p.name for p in P.PROGRAMS]
    assert len(names) == len(set(names)), "duplicate program names"
