"""Modules written inside the trace: later reads see the writes.

add_module, register_module and a submodule assigned through _modules on a
module from outside the call are logged writes to its _modules dict
(replayed after the graph); iterating the module, calling it (Sequential's
forward iterates it), reading the submodule as an attribute and
named_children() must see them, as eager does. A module whose __init__ has
a graph break (torch.compile patches nn.Module.__init__ with a call ptc
breaks at, so after any torch.compile in the process every module made
inside a compiled function did) resumes as such a module: main iterated
its real, still empty _modules and returned the input unchanged from
`self.seq[:2](x)` (capture_programs' SequentialSlicing, failing only when a
test file that ran torch.compile shared the process).

Each program runs eagerly and under ptc.compile(backend="eager") on fresh
modules: results, the module tree afterwards and graph/break counts.
"""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import ptc  # noqa: E402
import capture_programs as P  # noqa: E402


def small_seq():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU())


def added_then_iterated(m, x):
    m.add_module("extra", nn.Sigmoid())
    return [type(c).__name__ for c in m], m(x)


def added_then_read_as_attribute(m, x):
    m.add_module("extra", nn.Sigmoid())
    return m.extra(x) * 2


def added_then_named_children(m, x):
    m.add_module("extra", nn.Tanh())
    return [n for n, _ in m.named_children()], len(m), m[-1](x)


def written_through_modules_dict(m, x):
    m._modules["2"] = nn.Tanh()
    return m(x), [type(c).__name__ for c in m.children()]


def replaced_then_iterated(m, x):
    m[1] = nn.Tanh()
    return m(x)


# (function, graphs, breaks). Setting a submodule through setattr (what
# Sequential's __setitem__, now inlined, does) still breaks (PTC-B010):
# nn.Module.__setattr__ is not replayed for submodules.
CASES = [(added_then_iterated, 1, 0), (added_then_read_as_attribute, 1, 0), (added_then_named_children, 1, 0),
         (written_through_modules_dict, 1, 0), (replaced_then_iterated, 1, 1)]


def tree(m):
    return [(n, type(c).__name__) for n, c in m.named_modules()]


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, atol=1e-6)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def counts(compiled):
    ex = ptc.ExplainOutput(list(getattr(compiled, "_ptc_compiled", compiled)._events()), None)
    return ex.graph_count, ex.break_count


@pytest.mark.parametrize("fn,graphs,breaks", CASES, ids=[c[0].__name__ for c in CASES])
def test_outside_module_written_then_read(fn, graphs, breaks):
    x = torch.randn(2, 4)
    eager_m, ptc_m = small_seq(), small_seq()
    want = fn(eager_m, x)
    compiled = ptc.compile(fn, backend="eager")
    got = compiled(ptc_m, x)
    assert same(want, got), (want, got)
    assert tree(eager_m) == tree(ptc_m)
    assert counts(compiled) == (graphs, breaks)


@pytest.fixture
def breaking_module_init(monkeypatch):
    init = nn.Module.__init__

    def patched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        print("made", type(self).__name__)  # a break (PTC-B004) inside every module's __init__

    monkeypatch.setattr(nn.Module, "__init__", patched_init)


def test_module_made_in_the_trace_with_a_break_in_its_init(breaking_module_init, capsys):
    torch.manual_seed(0)
    m, x = P.SequentialSlicing(), torch.randn(2, 8)
    capsys.readouterr()
    want = m(x)
    printed = capsys.readouterr().out
    compiled = ptc.compile(m, backend="eager")
    for _ in range(2):
        assert same(want, compiled(x))
        assert capsys.readouterr().out == printed
    # the slice's Sequential.__init__ prints: one break, the graph before
    # it (nothing: no tensor op yet) and the one after
    assert counts(compiled) == (2, 1)


def test_sequential_built_in_the_trace_with_a_break_in_its_init(breaking_module_init, capsys):
    def f(x):
        s = nn.Sequential(nn.ReLU(), nn.Tanh())
        return [type(c).__name__ for c in s], s(x)

    x = torch.randn(2, 4)
    want = f(x)
    printed = capsys.readouterr().out
    assert same(want, ptc.compile(f, backend="eager")(x))
    assert capsys.readouterr().out == printed


def test_capture_programs_after_torch_compile_in_the_same_process():
    """The triggering sequence: torch.compile first, then the corpus
    program, in one process (a child, so that torch.compile's patch of
    nn.Module.__init__ does not outlive this test)."""
    pytest.importorskip("torch._dynamo")
    here = os.path.dirname(os.path.abspath(__file__))
    script = (
        "import torch, ptc, capture_programs as P\n"
        "torch.compile(lambda x: x + 1, backend='eager')(torch.ones(2))\n"
        "assert 'patched_init' in torch.nn.Module.__init__.__qualname__\n"
        "import test_capture_programs as T\n"
        "prog = next(p for p in P.PROGRAMS if p.name == 'SequentialSlicing')\n"
        "T.test_program_eager_backend(prog)  # results and (1 graph, 0 breaks), as torch.compile\n"
        "T.test_program_reference_backend(prog)\n"
        "T.test_program_ptc_backend(prog)\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + sys.path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
