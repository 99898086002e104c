"""torch.compile(model, backend="ptc"): Dynamo's front end feeding ptc's
compiler, on the models the capture tests use (torchvision, timm, Hugging
Face, built from configs). Each of Dynamo's graphs must reach ptc (compiled
by ptc.compile, captured as one ptc graph with no ptc break: the FX code is
straight-line torch calls) and the results must equal eager's.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch._dynamo", reason="torch.compile needs torch 2")

import ptc  # noqa: E402
import ptc._dynamo  # noqa: E402
from models_common import randomize_zero_params, rel_error  # noqa: E402


def build(name):
    torch.manual_seed(0)
    if name.startswith("torchvision."):
        tv = pytest.importorskip("torchvision")
        m = getattr(tv.models, name.split(".", 1)[1])(num_classes=10)
        return m, (torch.randn(2, 3, 64, 64),), {}
    if name == "timm.vit_tiny":
        timm = pytest.importorskip("timm")
        m = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8,
                              num_classes=10)
        return m, (torch.randn(2, 3, 32, 32),), {}
    T = pytest.importorskip("transformers")
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
    if name == "transformers.bert":
        cfg = T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                           intermediate_size=128, vocab_size=1000)
        return T.BertModel(cfg), (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if name == "transformers.gpt2":
        cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64,
                           bos_token_id=0, eos_token_id=0)
        return T.GPT2LMHeadModel(cfg), (), {"input_ids": ids, "use_cache": False}
    raise KeyError(name)


MODELS = ["torchvision.resnet18", "torchvision.mobilenet_v3_small", "timm.vit_tiny",
          "transformers.bert", "transformers.gpt2"]


def compiling_backend(compiled):
    """ptc's Dynamo backend, keeping each compiled graph in `compiled`."""
    def backend(gm, example_inputs):
        fn = ptc._dynamo.ptc_backend(gm, example_inputs)
        compiled.append(fn)
        return fn
    return backend


def assert_one_ptc_graph_each(compiled):
    """Every graph Dynamo made ran as one ptc graph, no ptc break inside it."""
    assert compiled, "Dynamo handed ptc no graph"
    for fn in compiled:
        events = ptc.ExplainOutput(fn.__func__._events(), None)
        assert events.graph_count == 1 and events.break_count == 0, str(events)


@pytest.mark.parametrize("name", MODELS)
def test_torch_compile_backend_ptc(name):
    model, args, kwargs = build(name)
    model = randomize_zero_params(model.eval())
    compiled = []
    backend = compiling_backend(compiled)
    torch._dynamo.reset()
    with torch.no_grad():
        ref = model(*args, **kwargs)
        got = torch.compile(model, backend=backend)(*args, **kwargs)
        again = torch.compile(model, backend=backend)(*args, **kwargs)
    assert rel_error(got, ref) <= 1e-4 and rel_error(again, ref) <= 1e-4
    assert_one_ptc_graph_each(compiled)
    torch._dynamo.reset()


def capture_set():
    """The capture tests' models (test_models_torchvision, _timm, _hf), as
    pytest params: the ones those tests mark slow are slow here too."""
    import test_models_hf
    import test_models_timm
    import test_models_torchvision as tv
    params = [pytest.param("torchvision." + n, marks=[pytest.mark.slow] if n in tv.SLOW else [])
              for n in tv.MODELS]
    params += [pytest.param("timm." + n, marks=pytest.mark.slow) for n in test_models_timm.MODELS]
    params += [pytest.param("transformers." + n) for n in ("bert", "gpt2", "t5", "distilbert", "vit")]
    return params


def build_as_capture_tests(name):
    """The model and inputs test_models_<family> builds for `name`."""
    family, model_name = name.split(".", 1)
    gen = torch.Generator().manual_seed(0)
    if family == "torchvision":
        import test_models_torchvision as tv
        size = tv.MODELS[model_name]
        return tv.build(model_name), (torch.randn(2, 3, size, size, generator=gen),), {}
    if family == "timm":
        import test_models_timm
        timm = pytest.importorskip("timm")
        torch.manual_seed(0)
        size = test_models_timm.MODELS[model_name]
        return (timm.create_model(model_name, pretrained=False),
                (torch.randn(2, 3, size, size, generator=gen),), {})
    import test_models_hf
    model, kwargs = test_models_hf.build(model_name)
    return model, (), kwargs


@pytest.mark.parametrize("name", capture_set())
def test_torch_compile_backend_ptc_on_the_capture_tests_models(name):
    """Issue 18: each of Dynamo's graphs of every model the capture tests run
    compiles with ptc (its kernels, not a fallback) and gives eager's results."""
    model, args, kwargs = build_as_capture_tests(name)
    model = model.eval()
    compiled = []
    backend = compiling_backend(compiled)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torch.no_grad():
            ref = model(*args, **kwargs)
            got = torch.compile(model, backend=backend)(*args, **kwargs)
    torch._dynamo.reset()
    assert rel_error(got, ref) <= 1e-4, rel_error(got, ref)
    # no fallback to eager, no notice of anything ptc did not act on
    assert not [str(w.message) for w in seen if str(w.message).startswith("ptc")]
    assert_one_ptc_graph_each(compiled)


def test_register_from_build_tree():
    ptc._dynamo.register()
    ptc._dynamo.register()  # twice is harmless
    assert "ptc" in torch._dynamo.list_backends()
    f = torch.compile(lambda x: torch.relu(x) * 2, backend="ptc")
    x = torch.randn(8)
    assert torch.equal(f(x), torch.relu(x) * 2)


def test_operator_methods_called_by_name():
    """FX code calls operators by their method names (a.__eq__(b)): one graph, no break."""
    def f(a, b):
        return (a.__eq__(b), a.__ne__(b), a.__add__(b), a.__sub__(b), a.__mul__(2.0),
                a.__truediv__(b), a.__gt__(0), a.__ge__(b), a.__lt__(b), a.__le__(0), a.__neg__(),
                a.__abs__(), (a > 0).__and__(b > 0), (a > 0).__or__(b > 0), (a > 0).__xor__(b > 0))
    a, b = torch.randn(5), torch.randn(5)
    a[1] = b[1]
    ex = ptc.explain(f, backend="ptc")(a, b)
    assert ex.graph_count == 1 and ex.break_count == 0, str(ex)
    for got, want in zip(ex.result, f(a, b)):
        assert torch.equal(got, want)


NUMPY_CHILD = r"""
import warnings
import numpy as np
import torch
import ptc, ptc._dynamo

cases = {
    "x.numpy() + 1": lambda x: x.numpy() + 1,
    "x.numpy() * 2": lambda x: x.numpy() * 2,
    "np.exp(x.numpy())": lambda x: np.exp(x.numpy()),
    "-x.numpy() > -3": lambda x: -x.numpy() > -3,
    "torch.from_numpy(x.numpy() - 1)": lambda x: torch.from_numpy(x.numpy() - 1),
}
for name, fn in cases.items():
    torch._dynamo.reset()
    compiled = []
    def backend(gm, example_inputs):
        compiled.append(ptc._dynamo.ptc_backend(gm, example_inputs))
        return compiled[-1]
    x = torch.arange(6.).reshape(2, 3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = torch.compile(fn, backend=backend)(x)
    want = fn(x)
    assert type(got) is type(want), (name, type(got))
    assert np.allclose(np.asarray(got), np.asarray(want)), (name, got, want)
    assert not [str(w.message) for w in seen if str(w.message).startswith("ptc")], name
    for c in compiled:
        ev = ptc.ExplainOutput(c.__func__._events(), None)
        assert ev.graph_count == 1 and ev.break_count == 0, (name, str(ev))
    print("ok", name)
"""


def test_numpy_operators_on_tensors_under_dynamo(tmp_path):
    """Dynamo writes x.numpy() + 1 as numpy_operator_wrapper(operator.add) on
    a torch._numpy ndarray of the tensor; operator.add run for real handed
    ptc's symbolic tensor to torch.add, which crashed the process (SIGSEGV).
    The operator is traced as a + b: one ptc graph, eager's values. In a
    child, so that a crash fails this test, not pytest."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.dirname(os.path.abspath(ptc.__file__)))  # this ptc's
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", NUMPY_CHILD],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-6000:])
    assert r.stdout.count("ok ") == 5, r.stdout
