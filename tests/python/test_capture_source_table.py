"""The trace's source table grows (doubling, by realloc) while values are
wrapped: nothing may hold a pointer into it across an addition.

class_method_guard held one across the constant source it adds for the
method's function, and read the attribute's parent from the freed table
when that addition grew it (ASan: heap-use-after-free in the GPT-2 FSDP2
test's rank; with glibc's freed memory perturbed, "a fresh entry rejects
its own state" and the function ran eagerly). The probe reads k attributes
before the method, k from 0 to 159, so that the method's source is added
at each size the table grows from (64 and 128). It runs in a child with
MALLOC_PERTURB_ set, so that reading freed memory reads garbage; against an
ASan build (scripts/test.sh's ASan stage) libasan sees the read itself.
"""
import pytest

torch = pytest.importorskip("torch")

from child_run import run_code  # noqa: E402

PROBE = """
    import warnings
    import torch, ptc

    warnings.simplefilter("error")  # ptc's "running it eagerly" warning fails the probe

    class Scaler:
        def m(self, x):
            return x * 2

    class Holder:
        pass

    ns = Holder()
    ns.obj = Scaler()
    for i in range(160):
        setattr(ns, "a%d" % i, torch.full((1,), float(i)))
    x = torch.ones(3)
    for k in range(160):
        g = {}
        exec("def f(x, ns):\\n    y = x" + "".join(" + ns.a%d" % i for i in range(k)) +
             "\\n    return ns.obj.m(y)\\n", g)
        cf = ptc.compile(g["f"], backend="eager")
        want = g["f"](x, ns)
        for _ in range(2):
            assert torch.equal(cf(x, ns), want), k
        compiles = [e for e in cf._events() if e["kind"] == "compile"]
        assert len(compiles) == 1, (k, cf._events())
    print("ok")
"""


def test_method_read_as_the_source_table_grows(tmp_path):
    out = run_code(PROBE, tmp_path, MALLOC_PERTURB_="165")
    assert out.splitlines() == ["ok"]
