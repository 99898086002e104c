"""ptc.compile's guards, cache, recompiles, fallbacks and Python API.

Guards: a dtype, shape, stride, requires_grad, global, closure cell, slice, module
attribute, train/eval, grad mode or autocast change recompiles, and the
recompile event names the guard with its old and new values; an identical
call compiles nothing; past the recompile limit the code runs eagerly after
one warning naming the guard. Fallbacks: an internal error runs the call
eagerly with one warning and a repro folder (or raises under strict mode /
PTC_STRICT=1). API: module wrappers behave like the module, explain's
fields, callable backends and ptc.Graph, the trace directory, logs, reset,
disable, decorators and methods.
"""
import collections
import json
import os
import re
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import ptc  # noqa: E402
from test_capture_iterators import counts  # noqa: E402

FLAG = True


def recompiles(compiled):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e["guard"] for e in handle._events() if e["kind"] == "recompile"]


def compiles(compiled):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e for e in handle._events() if e["kind"] == "compile"]


@pytest.fixture(autouse=True)
def _restore():
    saved = {k: getattr(ptc.config, k) for k in ("recompile_limit", "strict", "inject_failure", "repro_dir")}
    yield
    for k, v in saved.items():
        setattr(ptc.config, k, v)
    ptc.config.trace_dir = None
    ptc.config.logs = ""


def f_add(x, y):
    return x * 2 + y


# ---- guards and recompiles ---------------------------------------------------------------


def test_identical_call_compiles_nothing():
    c = ptc.compile(f_add, backend="eager")
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for _ in range(3):
        assert torch.equal(c(x, y), f_add(x, y))
    assert len(compiles(c)) == 1 and not recompiles(c)
    # New tensors with the same metadata hit the same entry.
    c(torch.randn(3, 4), torch.randn(3, 4))
    assert len(compiles(c)) == 1


def test_dtype_change_recompiles():
    c = ptc.compile(f_add, backend="eager")
    c(torch.randn(3, 4), torch.randn(3, 4))
    x = torch.randn(3, 4, dtype=torch.float64)
    assert torch.equal(c(x, x), f_add(x, x))
    (guard,) = recompiles(c)
    assert guard.startswith("L['x']: tensor f32[3,4]") and "now f64[3,4]" in guard, guard


def test_shape_change_recompiles():
    c = ptc.compile(f_add, backend="eager")
    c(torch.randn(3, 4), torch.randn(3, 4))
    x = torch.randn(5, 4)
    assert torch.equal(c(x, x), f_add(x, x))
    (guard,) = recompiles(c)
    assert "f32[3,4]" in guard and "now f32[5,4]" in guard, guard


def test_stride_change_recompiles():
    c = ptc.compile(f_add, backend="eager")
    base = torch.randn(3, 8)
    c(base[:, :4].contiguous(), base[:, :4].contiguous())
    x = base[:, ::2]  # same shape, strides (8, 2)
    assert torch.equal(c(x, x), f_add(x, x))
    (guard,) = recompiles(c)
    assert "{4,1}" in guard and "{8,2}" in guard, guard


def test_requires_grad_change_recompiles():
    c = ptc.compile(f_add, backend="eager")
    c(torch.randn(3, 4), torch.randn(3, 4))
    x = torch.randn(3, 4, requires_grad=True)
    out = c(x, x)
    assert out.requires_grad
    (guard,) = recompiles(c)
    assert "L['x']" in guard, guard


def f_flag(x):
    if FLAG:
        return x + 1
    return x - 1


def test_global_flag_change_recompiles():
    global FLAG
    c = ptc.compile(f_flag, backend="eager")
    x = torch.randn(3)
    try:
        FLAG = True
        assert torch.equal(c(x), x + 1)
        FLAG = False
        assert torch.equal(c(x), x - 1)
        FLAG = True
        assert torch.equal(c(x), x + 1)  # the first entry again
    finally:
        FLAG = True
    assert recompiles(c) == ["G['FLAG'] is True (now False)"]
    assert len(compiles(c)) == 2


def test_closure_cell_change_recompiles():
    k = 2

    def f(x):
        return x * k

    c = ptc.compile(f, backend="eager")
    x = torch.randn(3)
    assert torch.equal(c(x), x * 2)
    k = 3
    assert torch.equal(c(x), x * 3)
    (guard,) = recompiles(c)
    assert "cell_contents" in guard and "now 3" in guard, guard


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 0.5
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x)) * self.scale


def sliced(x, s):
    return x[s] * 2


def test_unhashable_argument_change_recompiles():
    """A slice argument (unhashable on 3.11) is guarded by value like any constant."""
    c = ptc.compile(sliced)
    x = torch.arange(10.0)
    for s in (slice(0, 3), slice(0, 3), slice(2, 6)):
        assert torch.equal(c(x, s), sliced(x, s))
    (guard,) = recompiles(c)
    assert "slice(0, 3, None)" in guard and "now slice(2, 6, None)" in guard, guard


def test_module_attribute_change_recompiles():
    m = Scaled().eval()
    c = ptc.compile(m, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.allclose(c(x), m(x))
        c.scale = 0.25  # the wrapper shares the module's attributes
        assert m.scale == 0.25
        assert torch.allclose(c(x), m(x))
    (guard,) = recompiles(c)
    assert "scale" in guard and "now 0.25" in guard, guard


def test_train_eval_switch_recompiles():
    m = Scaled().eval()
    c = ptc.compile(m, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        c(x)
        c.train()
        assert m.training and c.training
        torch.manual_seed(0)
        out = c(x)
        kept = out != 0
        assert 0 < kept.float().mean() < 1  # dropout is on
        c.eval()
        assert torch.allclose(c(x), m(x))
    guards = recompiles(c)
    assert len(guards) == 1 and ".training" in guards[0] and "now True" in guards[0], guards
    assert len(compiles(c)) == 2  # eval again: the first entry


def test_grad_mode_switch_recompiles():
    c = ptc.compile(f_add, backend="eager")
    x = torch.randn(3, 4, requires_grad=True)
    assert c(x, x).requires_grad
    with torch.no_grad():
        assert not c(x, x).requires_grad
    guards = recompiles(c)
    assert guards == ["torch.is_grad_enabled() == True (now False)"], guards


@pytest.mark.skipif(not hasattr(torch, "get_autocast_dtype"), reason="torch < 2.4: older autocast API")
def test_autocast_state_recompiles():
    def mm(a, b):
        return a @ b

    c = ptc.compile(mm, backend="eager")
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    assert c(a, b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = c(a, b), mm(a, b)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)
    (guard,) = recompiles(c)
    assert guard.startswith("autocast state == cpu off") and "now cpu bf16" in guard, guard


def test_recompile_limit_warns_once_and_runs_eagerly():
    ptc.config.recompile_limit = 3
    c = ptc.compile(f_add, backend="eager", dynamic=False)  # every new size recompiles
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 8):
            x = torch.randn(n, 2)
            assert torch.equal(c(x, x), f_add(x, x))
    msgs = [str(w.message) for w in caught if "recompile limit" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "(3)" in msgs[0] and "L['x']: tensor" in msgs[0], msgs[0]
    assert len(compiles(c)) == 3
    handle = c
    assert [e for e in handle._events() if e["kind"] == "recompile_limit"]


def test_reset_drops_entries():
    c = ptc.compile(f_add, backend="eager")
    x = torch.randn(2)
    c(x, x)
    assert len(compiles(c)) == 1
    ptc.reset()
    assert c._events() == []
    c(x, x)
    assert [e["reason"] for e in compiles(c)] == ["first call"]


# ---- fallbacks ------------------------------------------------------------------------------


def test_internal_error_falls_back_with_one_warning_and_a_repro(tmp_path):
    ptc.config.repro_dir = str(tmp_path)
    ptc.config.inject_failure = "compile"
    c = ptc.compile(f_add, backend="eager")
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.equal(c(x, x), f_add(x, x))
    msgs = [str(w.message) for w in caught if str(w.message).startswith("ptc:")]
    assert len(msgs) == 1, msgs
    assert "internal error while compiling f_add" in msgs[0] and "repro written to" in msgs[0], msgs[0]
    path = msgs[0].split("repro written to ")[1].rstrip(")")
    assert path.startswith(str(tmp_path)) and os.path.isdir(path)
    assert os.path.exists(os.path.join(path, "graph.ptir")) and os.path.exists(os.path.join(path, "repro.json"))
    info = json.load(open(os.path.join(path, "repro.json")))
    assert info["kind"] == "error" and "injected" in info["message"]


@pytest.mark.parametrize("stage,backend,message", [
    ("compile", "eager", "injected internal error"),
    # a backend that cannot compile the graph raises rather than running it
    # through torch ops
    ("backend", "reference", "injected backend failure")])
def test_strict_mode_raises(stage, backend, message):
    ptc.config.inject_failure = stage
    ptc.config.strict = True
    c = ptc.compile(f_add, backend=backend)
    with pytest.raises(Exception, match=message):
        c(torch.randn(2), torch.randn(2))


def test_fullgraph_raises_internal_errors():
    ptc.config.inject_failure = "compile"
    c = ptc.compile(f_add, backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="injected internal error"):
        c(torch.randn(2), torch.randn(2))


def test_ptc_strict_environment_variable():
    code = ("import torch, ptc\n"
            "ptc.config.inject_failure = 'compile'\n"
            "assert ptc.config.strict\n"
            "try:\n"
            "    ptc.compile(lambda x: x + 1, backend='eager')(torch.ones(2))\n"
            "except Exception as e:\n"
            "    print('raised', type(e).__name__)\n")
    env = dict(os.environ, PTC_STRICT="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "raised InternalError", r.stdout + r.stderr


def test_backend_failure_runs_torch_ops_with_a_warning(tmp_path):
    ptc.config.repro_dir = str(tmp_path)
    ptc.config.inject_failure = "backend"
    c = ptc.compile(f_add, backend="reference")
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.equal(c(x, x), f_add(x, x))
        assert torch.equal(c(x, x), f_add(x, x))
    msgs = [str(w.message) for w in caught if str(w.message).startswith("ptc:")]
    assert len(msgs) == 1 and "backend failed" in msgs[0] and "repro:" in msgs[0], msgs


AUTOCAST_FAILURE = """
import torch, ptc
def f(x, w):
    return torch.relu(x @ w) + 1
c = ptc.compile(f)
with torch.autocast("cpu", dtype=torch.bfloat16):
    try:
        c(torch.randn(4, 8), torch.randn(8, 3))
        print("no error")
    except Exception as e:
        print("raised", type(e).__name__, str(e)[:300])
    print("autocast on", torch.is_autocast_cpu_enabled())
"""


def test_strict_run_failure_under_autocast_raises_its_own_error():
    """A graph that fails while running inside an autocast region raises its
    own error, with the region's state back; restoring autocast with the
    error pending once turned it into a SystemError."""
    env = dict(os.environ, PTC_STRICT="1", PTC_INJECT="runtime:mm:error")
    r = subprocess.run([sys.executable, "-c", AUTOCAST_FAILURE], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("raised InternalError") and "injected error in runtime of mm" in out[0], out
    assert out[1] == "autocast on True", out


def test_runtime_log_names_each_extern_call():
    """PTC_LOGS=+runtime writes one line per call into torch (an extern): its
    inputs' dtypes, sizes, strides and alignment, what decides which of
    torch's kernels runs."""
    code = ("import torch, ptc\n"
            "f = ptc.compile(lambda x, w: torch.relu(x @ w.t()))\n"
            "f(torch.randn(8, 16), torch.randn(4, 16))\n")
    env = dict(os.environ, PTC_LOGS="+runtime")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "extern mm:" in ln]
    assert lines and "f32[8,16] strides (16,1)" in lines[0] and "f32[16,4] strides (1,16)" in lines[0], r.stderr


# ---- the Python API ----------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)
        self.register_buffer("offset", torch.ones(2))

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))) + self.offset


def test_module_wrapper_behaves_like_the_module():
    m = Net()
    c = ptc.compile(m, backend="eager")
    assert isinstance(c, Net) and isinstance(c, nn.Module)
    assert c.fc1 is m.fc1 and c.fc1.weight is m.fc1.weight
    assert list(c.state_dict()) == list(m.state_dict())
    assert [p is q for p, q in zip(c.parameters(), m.parameters())] == [True] * 4
    c.eval()
    assert not m.training
    c.extra = 5
    assert m.extra == 5
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.allclose(c(x), m(x))
        m.fc2.bias.fill_(1.0)  # parameters are the same objects: no recompile needed
        assert torch.allclose(c(x), m(x))
    sd = {k: v.clone() + 1 for k, v in m.state_dict().items()}
    c.load_state_dict(sd)
    assert torch.equal(m.fc1.weight, sd["fc1.weight"])
    assert c._orig_mod is m


def test_module_training_step_gets_gradients():
    m = Net()
    c = ptc.compile(m)  # backend "ptc": gradients run through torch ops
    x = torch.randn(3, 4)
    ex_loss = m(x).sum()
    ex_loss.backward()
    want = m.fc1.weight.grad.clone()
    m.zero_grad()
    c(x).sum().backward()
    assert torch.allclose(m.fc1.weight.grad, want)


def test_explain_result_fields():
    def g(x):
        y = x.relu() * 2
        print("mid")
        return y + 1

    ex = ptc.explain(g)(torch.randn(3))
    assert ex.graph_count == 2 and ex.break_count == 1
    b = ex.breaks[0]
    assert b["code"] == "PTC-B005" and b["line"] > 0 and "print" in b["text"] and b["hint"]
    assert ex.guards and all(isinstance(s, str) for gs in ex.guards for s in gs)
    assert ex.compile_times and all(t["ms"] >= 0 for t in ex.compile_times)
    assert isinstance(ex.graphs[0], ptc.Graph) and ex.graphs[0].ops() == ["relu", "mul"]
    d = ex.as_dict()
    assert d["graph_count"] == 2 and d["breaks"][0]["code"] == "PTC-B005"
    json.dumps({k: v for k, v in d.items() if k != "graphs"})
    text = str(ex)  # ptexplain's report of this one call
    assert text.startswith("ptexplain ptc.explain(")
    assert re.search(r"graphs +2\n", text) and "#1 PTC-B005 print or other I/O" in text
    assert "Graph breaks" in text and "Recompiles" in text and "Performance hints" in text
    assert torch.is_tensor(ex.result)


def test_explain_measures_only_its_call_and_keeps_the_outer_measurements():
    ptc._C._measure(True)
    try:
        before = ptc._C._measured()["calls"]
        c = ptc.compile(lambda x: x * 3)
        c(torch.randn(2))
        ex = ptc.explain(lambda x: x - 1)(torch.randn(2))
        assert re.search(r"graphs +1\n", str(ex)) and "1 compiled call" in str(ex)
        assert ptc._C._measured()["calls"] == before + 2  # its call was added to the outer count
        with pytest.raises(RuntimeError, match="no measuring scope"):
            ptc._C._measure_scope(False)
    finally:
        ptc._C._measure(False)


def test_nodes_record_source_and_module_path():
    ex = ptc.explain(Net())(torch.randn(3, 4))
    (g,) = ex.graphs
    nodes = g.nodes
    assert nodes and all(n.file.endswith("test_capture_guards.py") or "torch" in n.file for n in nodes)
    linear = [n for n in nodes if n.op == "linear"]
    assert [n.module for n in linear] == ["fc1", "fc2"]
    assert all(n.line > 0 and n.col > 0 and n.source for n in nodes)
    relu = [n for n in nodes if n.op == "relu"][0]
    assert relu.source == "F.relu(self.fc1(x))" and relu.file == __file__


def test_callable_backend_receives_a_graph():
    seen = []

    def backend(graph):
        seen.append(graph)
        return graph.run

    c = ptc.compile(f_add, backend=backend)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(c(x, y), f_add(x, y))
    (g,) = seen
    assert isinstance(g, ptc.Graph) and g.ops() == ["mul", "add"]
    assert str(g).startswith("# ptc ir v1") and len(g.inputs) == 2 and len(g.outputs) == 1
    assert torch.equal(g.run(x, y)[0], f_add(x, y))


def test_trace_directory_files(tmp_path):
    ptc.config.trace_dir = str(tmp_path)

    def h(x):
        y = x * 3
        print("between")
        return y.sum()

    c = ptc.compile(h, backend="eager")
    c(torch.randn(4))
    index = json.load(open(tmp_path / "index.json"))
    folders = [e["id"] for e in index["compiles"]]
    assert len(folders) == 2, folders
    first = tmp_path / folders[0]
    assert open(first / "captured.ptir").read().startswith("# ptc ir v1")
    assert "L['x']" in open(first / "guards.txt").read()
    breaks = json.load(open(first / "breaks.json"))
    text = json.dumps(breaks)
    assert "PTC-B005" in text


def test_logs_components(capfd):
    ptc.config.logs = "graph_breaks,recompiles"

    def h(x):
        print("hi")
        return x + 1

    c = ptc.compile(h, backend="eager")
    c(torch.randn(2))
    c(torch.randn(3))
    err = capfd.readouterr().err
    assert "[ptc:graph_breaks]" in err and "PTC-B005" in err, err
    assert "[ptc:recompiles]" in err, err


def test_disable_and_decorators():
    @ptc.disable
    def helper(t):
        return t + 100

    @ptc.compile(backend="eager")
    def f(x):
        return helper(x * 2)

    x = torch.randn(2)
    assert torch.equal(f(x), x * 2 + 100)
    assert f.__name__ == "f"

    class Box:
        def __init__(self):
            self.k = 3

        def scale(self, x):
            return x * self.k

    b = Box()
    m = ptc.compile(b.scale, backend="eager")
    assert torch.equal(m(x), x * 3)


def test_random_ops_differ_per_call():
    def r(x):
        return torch.rand(4) + x * 0

    c = ptc.compile(r)
    x = torch.zeros(4)
    a, b = c(x), c(x)
    assert not torch.equal(a, b)
    assert ((a >= 0) & (a < 1)).all() and ((b >= 0) & (b < 1)).all()


def test_compile_arguments_are_checked():
    with pytest.raises(ValueError):
        ptc.compile(f_add, mode="fastest")
    with pytest.raises(TypeError):
        ptc.compile(3)
    c = ptc.compile(f_add, dynamic=True, mode="max-autotune", backend="eager")
    x = torch.randn(2)
    assert torch.equal(c(x, x), f_add(x, x))


def test_replacing_a_parameter_recompiles():
    m = nn.Linear(4, 3)
    c = ptc.compile(m, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        c(x)
        c(x)  # the same parameter objects: the fast path
        m.weight = nn.Parameter(torch.randn(3, 4, dtype=torch.float64))
        m.bias = nn.Parameter(torch.randn(3, dtype=torch.float64))
        assert torch.equal(c(x.double()), m(x.double()))
    guards = recompiles(c)
    assert len(guards) == 1 and "f64" in guards[0], guards


def copies_a_set(x, s):
    return x + 1, s.copy(), s.union({9}), s.issubset({1, 2})


def operates_on_a_set(x, s):
    return x + 1, s - {1}, {3} | s, s == {1, 2}


def hands_a_set_to_c_functions(x, s):
    import math
    return x + 1, str(s), math.fsum(s)


def unpacks_into_a_tuple(x, s):
    return x + 1, (*s,)  # iterated in the graph, its order guarded


@pytest.mark.parametrize("fn", [copies_a_set, operates_on_a_set, hands_a_set_to_c_functions,
                                unpacks_into_a_tuple])
def test_what_an_outside_set_holds_is_guarded(fn):
    """main: s.copy(), str(s), math.fsum(s) and (*s,) of an outside set came
    back with the first call's items for a set of the same size ({1, 2} then
    {4, 5}): the set reached C code with no guard, and LIST_TO_TUPLE after
    the unpacking's break read the resumed frame's list with none (s - {1}
    and s.union broke). Now the set's items are guarded equal (a recompile)
    and the list is read through its source; a graph each."""
    compiled = ptc.compile(fn, backend="eager")
    for call, s in enumerate(({1, 2}, {4, 5}, {1, 2}, {2, 7})):
        want, got = fn(torch.zeros(1), set(s)), compiled(torch.zeros(1), set(s))
        assert repr(got) == repr(want), (s, got, want)
        if call == 0:
            assert counts(compiled) == (1, 0)
    fs = ptc.compile(fn, backend="eager")
    for s in (frozenset({1, 2}), frozenset({4, 5})):
        assert repr(fs(torch.zeros(1), s)) == repr(fn(torch.zeros(1), s))


def reads_a_set_of_tensors(x, s):
    return x + 1, s.copy()


def test_a_set_of_tensors_read_whole_breaks_and_gives_eager_result():
    t = torch.ones(1)
    compiled = ptc.compile(reads_a_set_of_tensors, backend="eager")
    got = compiled(torch.zeros(1), {t})[1]
    assert len(got) == 1 and next(iter(got)) is t


def formats_and_compares_what_it_holds(x, l):
    return x + 1, str(l), l == [[1, 2]], "%s" % (l,), str([l]), f"{l}", [l] == [[[1, 2]]]


@pytest.mark.parametrize("first,second", [([[1, 2]], [[4, 5]]), ({"k": [1]}, {"k": [2]}),
                                          ([(1, [2])], [(1, [3])])])
def test_what_outside_containers_hold_at_any_depth_is_guarded(first, second):
    """main: C code reading an outside container's nested containers (str(l)
    and l == [[1, 2]] of l = [[1, 2]]) or an outside container held in one
    the trace made (str([l]), "%s" % (l,), f"{l}") gave the first call's
    answer for [[4, 5]]: only the top level was guarded. One graph each."""
    fn = formats_and_compares_what_it_holds
    compiled = ptc.compile(fn, backend="eager")
    for call, l in enumerate((first, second, first)):
        assert repr(compiled(torch.zeros(1), l)) == repr(fn(torch.zeros(1), l)), l
        if call == 0:
            assert counts(compiled) == (1, 0)


def reads_a_nested_list_after_writing_it(x, l):
    l[0].append(3)
    return x + 1, str(l), l == [[1, 2, 3]]


def test_a_written_container_held_in_another_read_by_c_code_breaks():
    """main: str(l) and l == [[1, 2, 3]] read the caller's inner list before
    the replay appended 3 ('[[1, 2]]', False). Now C code reading it breaks
    there (PTC-B009) and sees the write."""
    compiled = ptc.compile(reads_a_nested_list_after_writing_it, backend="eager")
    want_l, got_l = [[1, 2]], [[1, 2]]
    want = reads_a_nested_list_after_writing_it(torch.zeros(1), want_l)
    assert repr(compiled(torch.zeros(1), got_l)) == repr(want) and got_l == want_l


def formats_a_typed_dict(x, d):
    return x + 1, str(d), f"{d}", str([d])


@pytest.mark.parametrize("first,second", [
    (collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=2, a=1)),
    (collections.defaultdict(list, a=[1]), collections.defaultdict(int, a=[1]))])
def test_an_outside_ordered_dict_or_defaultdict_read_by_c_code_keeps_its_type(first, second):
    """main: str(od) of an outside OrderedDict gave "{'a': 1, 'b': 2}" (C
    code got a plain dict of its items), and f"{d}" of a defaultdict kept
    the first call's default_factory. One graph each."""
    compiled = ptc.compile(formats_a_typed_dict, backend="eager")
    for call, d in enumerate((first, second)):
        assert repr(compiled(torch.zeros(1), d)) == repr(formats_a_typed_dict(torch.zeros(1), d))
        if call == 0:
            assert counts(compiled) == (1, 0)


Pair = collections.namedtuple("Pair", "a b")


class Tagged(dict):
    def __repr__(self):
        return "Tagged" + dict.__repr__(self)


def formats_a_subclass_instance(x, o):
    return x + 1, str(o), f"{o!r}", str([o])


@pytest.mark.parametrize("first,second", [(Pair(1, [2]), Pair(1, [3])), (Tagged(a=1), Tagged(a=2))])
def test_an_outside_subclass_instance_read_by_c_code_keeps_its_type(first, second):
    """main: str(p) of an outside namedtuple gave '(1, [2])', not
    'Pair(a=1, b=[2])': C code got a plain tuple of its items. A subclass
    instance whose items the trace reads as they are is handed over itself."""
    compiled = ptc.compile(formats_a_subclass_instance, backend="eager")
    for call, o in enumerate((first, second)):
        assert repr(compiled(torch.zeros(1), o)) == repr(formats_a_subclass_instance(torch.zeros(1), o))
        if call == 0:
            assert counts(compiled) == (1, 0)
