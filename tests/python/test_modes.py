"""Options ptc does not act on warn once and reach ptexplain's Notes; ptc.set_stance
behaves as torch.compiler.set_stance (issue 19 item 3)."""
import subprocess
import sys
import warnings

import pytest
import torch

import ptc
from ptc import _notices


def f_add(x):
    return x + 1


@pytest.fixture(autouse=True)
def fresh():
    _notices._recorded.clear()
    ptc.reset()
    yield
    ptc.set_stance("default")
    torch.compiler.set_stance("default")
    _notices._recorded.clear()


def compile_warnings(**kwargs):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        c = ptc.compile(f_add, **kwargs)
    return c, [str(w.message) for w in seen if str(w.message).startswith("ptc:")]


@pytest.mark.parametrize("mode,gap", [("max-autotune", "no other implementation to choose"),
                                      ("max-autotune-no-cudagraphs", "no other implementation to choose")])
def test_what_a_mode_lacks_warns_once(mode, gap):
    c, seen = compile_warnings(mode=mode)
    assert len(seen) == 1 and mode in seen[0] and gap in seen[0], seen
    assert compile_warnings(mode=mode)[1] == []  # once per process
    x = torch.randn(3)
    assert torch.equal(c(x), x + 1)
    assert any(mode in n for n in _notices.recorded())


def test_reduce_overhead_on_the_cpu_says_it_has_no_effect_there():
    c, seen = compile_warnings(mode="reduce-overhead")
    assert seen == []  # it acts on CUDA graphs: the device is known at the first compile
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as ran:
        warnings.simplefilter("always")
        assert torch.equal(c(x), x + 1)
        assert torch.equal(c(x), x + 1)
    texts = [str(w.message) for w in ran if str(w.message).startswith("ptc:")]
    assert len(texts) == 1 and "no effect on graphs that run on the CPU" in texts[0], texts
    assert any("reduce-overhead" in n and "CPU" in n for n in _notices.recorded())


def test_default_mode_and_none_are_quiet():
    assert compile_warnings(mode="default")[1] == []
    assert compile_warnings(mode=None)[1] == []


def test_options_apply_ptc_settings_and_name_the_rest():
    prior = ptc.config.recompile_limit
    try:
        _, seen = compile_warnings(options={"recompile_limit": 5, "triton.cudagraphs": True,
                                            "epilogue_fusion": False})
        assert ptc.config.recompile_limit == 5
        assert len(seen) == 2, seen
        assert seen[0].startswith("ptc: options['epilogue_fusion'] is not a ptc setting")
        assert seen[1].startswith("ptc: options['triton.cudagraphs'] is not a ptc setting: ptc "
                                  "does not act on it; ptc does the same with "
                                  "mode='reduce-overhead'"), seen
        assert all("recompile_limit" in t for t in seen), seen
    finally:
        ptc.config.recompile_limit = prior


def test_each_option_not_acted_on_is_named_once_per_process():
    """A key comes with other keys in later calls, or through torch.compile's
    Dynamo backend: it is still named in one warning only (main named it
    again in each call's warning for a new set of keys)."""
    import ptc._dynamo

    ptc._dynamo.register()
    _, first = compile_warnings(options={"epilogue_fusion": 1})
    _, second = compile_warnings(options={"epilogue_fusion": 1, "shape_padding": 1})
    with warnings.catch_warnings(record=True) as ran:
        warnings.simplefilter("always")
        g = torch.compile(lambda x: x + 3, backend="ptc",
                          options={"epilogue_fusion": 1, "shape_padding": 1, "max_autotune": True})
        assert torch.equal(g(torch.ones(3)), torch.ones(3) + 3)
    third = [str(w.message) for w in ran if str(w.message).startswith("ptc:")]
    named = [t for t in first + second + third if "epilogue_fusion" in t]
    assert len(named) == 1, first + second + third
    assert [t.split(" is ")[0] for t in second + third] == \
        ["ptc: options['shape_padding']", "ptc: options['max_autotune']"], second + third
    assert "ptc does the same with mode='max-autotune-no-cudagraphs'" in third[-1], third
    assert sum("epilogue_fusion" in n for n in _notices.recorded()) == 1


@pytest.mark.parametrize("backend,what", [("aot_eager", "AOT"), ("cudagraphs", "CUDA graphs")])
def test_torch_backend_names_that_ptc_maps_warn(backend, what):
    c, seen = compile_warnings(backend=backend)
    assert len(seen) == 1 and what in seen[0]
    x = torch.randn(3)
    assert torch.equal(c(x), x + 1)
    assert compile_warnings(backend="inductor")[1] == []


def test_disable_keyword_returns_the_function():
    assert ptc.compile(f_add, disable=True) is f_add
    assert ptc.compile(disable=True)(f_add) is f_add


def counting_backend(seen):
    """A backend that records each compile and runs the captured graph as it is."""
    def backend(graph):
        seen.append(graph)
        return graph.run
    return backend


def test_force_eager_runs_without_compiling():
    seen = []
    c = ptc.compile(f_add, backend=counting_backend(seen))
    x = torch.randn(3)
    with ptc.set_stance("force_eager"):
        assert torch.equal(c(x), x + 1)
        assert torch.equal(c(x), x + 1)
    assert seen == []
    assert torch.equal(c(x), x + 1)
    assert len(seen) == 1


def test_fail_on_recompile_raises_on_a_recompile_only():
    c = ptc.compile(f_add, backend="eager")
    c(torch.randn(3))
    with ptc.set_stance("fail_on_recompile"):
        c(torch.randn(3))  # a cache hit is fine
        with pytest.raises(RuntimeError, match=r"fail_on_recompile.*f_add.*now f32\[5\]"):
            c(torch.randn(5))
        g = ptc.compile(lambda x: x - 1, backend="eager")
        assert torch.equal(g(torch.ones(2)), torch.zeros(2))  # a first compile is fine
    assert ptc._C._get_config()["stance"] == "default"
    assert torch.equal(c(torch.zeros(5)), torch.ones(5))


def test_eager_on_recompile_uses_the_cache_and_runs_misses_eagerly():
    seen = []
    c = ptc.compile(f_add, backend=counting_backend(seen))
    c(torch.randn(3))
    with ptc.set_stance("eager_on_recompile"):
        x3, x5 = torch.randn(3), torch.randn(5)
        assert torch.equal(c(x3), x3 + 1)
        assert torch.equal(c(x5), x5 + 1)
        assert torch.equal(c(x5), x5 + 1)
    assert len(seen) == 1
    c(x5)  # the stance is over: size 5 compiles now
    assert len(seen) == 2


def test_eager_then_compile_and_the_decorator_form():
    seen = []
    c = ptc.compile(f_add, backend=counting_backend(seen))

    @ptc.set_stance("eager_then_compile")
    def run(x):
        return c(x)
    assert ptc._C._get_config()["stance"] == "default"  # a decorator sets it only inside
    x = torch.randn(3)
    assert torch.equal(run(x), x + 1)
    assert seen == []  # the first call ran eagerly
    assert torch.equal(run(x), x + 1)
    assert len(seen) == 1


def test_torch_compiler_set_stance_is_followed():
    """torch.compiler.set_stance, as a context manager, a decorator and a
    call, reaches ptc's compiled functions as ptc.set_stance does (it was
    not acted on: ptc compiled under torch's force_eager)."""
    seen = []
    c = ptc.compile(f_add, backend=counting_backend(seen))
    x = torch.randn(3)
    with torch.compiler.set_stance("force_eager"):
        assert torch.equal(c(x), x + 1)
    assert seen == []
    c(x)
    assert len(seen) == 1
    with torch.compiler.set_stance("fail_on_recompile"):
        c(x)
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            c(torch.randn(5))

    @torch.compiler.set_stance("eager_on_recompile")
    def run(t):
        return c(t)
    x7 = torch.randn(7)
    assert torch.equal(run(x7), x7 + 1)
    assert len(seen) == 1
    torch.compiler.set_stance("force_eager")  # the call form lasts until the next
    c(torch.randn(9))
    assert len(seen) == 1
    torch.compiler.set_stance("default")
    c(torch.randn(9))
    assert len(seen) == 2


def test_a_stance_set_through_ptc_wins_over_torchs():
    seen = []
    c = ptc.compile(f_add, backend=counting_backend(seen))
    with torch.compiler.set_stance("force_eager"), ptc.set_stance("eager_then_compile"):
        c(torch.randn(3))  # eager_then_compile: the first call runs eagerly
        c(torch.randn(3))
    assert len(seen) == 1


def test_what_torchs_stance_asks_and_ptc_does_not_do_warns_once():
    c = ptc.compile(f_add, backend="eager")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
            c(torch.randn(3))
            c(torch.randn(3))
    texts = [str(w.message) for w in seen if "skip_guard_eval_unsafe" in str(w.message)]
    assert len(texts) == 1 and texts[0].startswith("ptc: torch.compiler.set_stance"), texts


def test_unknown_stance_is_an_error():
    with pytest.raises(ValueError, match="unknown stance 'fastest'"):
        ptc.set_stance("fastest")
    assert ptc._C._get_config()["stance"] == "default"


def test_unsupported_set_stance_arguments_warn():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with ptc.set_stance("default", skip_guard_eval_unsafe=True, force_backend="eager"):
            pass
    texts = [str(w.message) for w in seen]
    assert any("skip_guard_eval_unsafe" in t for t in texts)
    assert any("force_backend" in t for t in texts)


def test_fullgraph_through_torch_compile_notes_ptcs_own_breaks(monkeypatch):
    """torch.compile(fullgraph=True, backend="ptc"): Dynamo hands ptc one
    whole graph; an op ptc cannot record (logcumsumexp) splits it anyway, which
    gives one notice per process naming fullgraph and the break (main said
    nothing); the result is eager's, and without fullgraph nothing is said."""
    import ptc._dynamo

    ptc._dynamo.register()
    monkeypatch.setattr(ptc._dynamo._noting_breaks, "noted", False)

    def no_ptc_op(x):
        return torch.logcumsumexp(x, 0) * 2

    x = torch.randn(5)
    for fullgraph, calls in ((False, 2), (True, 2), (True, 1)):
        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as ran:
            warnings.simplefilter("always")
            f = torch.compile(no_ptc_op, backend="ptc", fullgraph=fullgraph)
            for _ in range(calls):
                assert torch.equal(f(x), no_ptc_op(x))
        texts = [str(w.message) for w in ran if "fullgraph" in str(w.message)]
        if not fullgraph:
            assert texts == [], texts
        elif calls == 2:
            assert len(texts) == 1 and texts[0].startswith(
                "ptc: torch.compile(fullgraph=True): ptc split a graph that Dynamo captured whole, "
                "at PTC-B007"), texts
        else:
            assert texts == [], texts  # once per process
    assert sum("fullgraph=True" in n for n in _notices.recorded()) == 1


def test_ptexplain_lists_what_was_not_acted_on(tmp_path):
    import os
    build = os.environ.get("PTC_BUILD_DIR", "build")
    script = tmp_path / "modes.py"
    script.write_text(
        "import torch\n"
        "f = torch.compile(lambda x: x * 2, mode='reduce-overhead', options={'epilogue_fusion': 1})\n"
        "f(torch.ones(3))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTC_") or k == "PTC_BUILD_DIR"}
    r = subprocess.run([os.path.join(build, "tools", "explain", "ptexplain"), "--no-color",
                        str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    notes = r.stdout[r.stdout.index("Notes"):]
    assert "mode='reduce-overhead' records CUDA graphs: it has no effect on graphs that run on " \
        "the CPU" in notes
    assert "options['epilogue_fusion'] is not a ptc setting: ptc does not act on it" in notes
