"""The trace's source and guard tables grow (doubling, by realloc) while
values are wrapped: nothing may hold a pointer into one across an addition.

class_method_guard held one into the source table across the constant
source it adds for the method's function, and read the attribute's parent
from the freed table when that addition grew it (ASan: heap-use-after-free
in the GPT-2 FSDP2 test's rank; with glibc's freed memory perturbed, "a
fresh entry rejects its own state" and the function ran eagerly).
symbolic_dims held one into the guard table across the size guards of an
input's new symbols, and set the symbols' bits through the tensor guard's
pointer read from the freed table (perturbed: a segmentation fault).

Each probe reads k attributes first, k from 0 to 159, so that the addition
comes at each size a table grows from (64 and 128). They run in a child with
MALLOC_PERTURB_ set, so that reading freed memory reads garbage; against an
ASan build (scripts/test.sh's ASan stage) libasan sees the read itself.
"""
import pytest

torch = pytest.importorskip("torch")

from child_run import run_code  # noqa: E402

PRELUDE = """
    import warnings
    import torch, ptc

    warnings.simplefilter("error")  # ptc's "running it eagerly" warning fails the probe

    class Holder:
        pass

    ns = Holder()
    for i in range(160):
        setattr(ns, "a%d" % i, torch.full((1,), float(i)))  # size 1: a guard, no symbol

    def reads(k):
        return "".join(" + ns.a%d" % i for i in range(k))

    def compiles_once(src, args, **options):
        g = {}
        exec(src, g)
        cf = ptc.compile(g["f"], backend="eager", **options)
        want = g["f"](*args)
        for _ in range(2):
            assert torch.equal(cf(*args), want), src
        compiles = [e for e in cf._events() if e["kind"] == "compile"]
        assert len(compiles) == 1, (src, cf._events())
"""

METHOD_PROBE = """
    class Scaler:
        def m(self, x):
            return x * 2

    ns.obj = Scaler()
    x = torch.ones(3)
    for k in range(160):
        compiles_once("def f(x, ns):\\n    y = x" + reads(k) + "\\n    return ns.obj.m(y)\\n", (x, ns))
    print("ok")
"""

SYMBOLIC_PROBE = """
    ns.z = torch.arange(5.0)
    for k in range(160):
        compiles_once("def f(ns):\\n    y = 1.0" + reads(k) + "\\n    return ns.z * y\\n", (ns,),
                      dynamic=True)
    print("ok")
"""


def test_method_read_as_the_source_table_grows(tmp_path):
    out = run_code(PRELUDE + METHOD_PROBE, tmp_path, MALLOC_PERTURB_="165")
    assert out.splitlines() == ["ok"]


def test_symbolic_input_read_as_the_guard_table_grows(tmp_path):
    out = run_code(PRELUDE + SYMBOLIC_PROBE, tmp_path, MALLOC_PERTURB_="165")
    assert out.splitlines() == ["ok"]
