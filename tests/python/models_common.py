"""Shared by the model tests (test_models_*.py): compile a model with ptc,
compare with eager, count graphs and breaks, ask torch._dynamo for its own
counts on the same model, and record one row per model in
$PTC_BUILD_DIR/models_report.json (the table in the capture report).
"""
import json
import os
import time
import warnings

import torch

import ptc

RTOL = 1e-4


def flat(o):
    """The tensors of a model output (tensors, tuples, dicts, ModelOutputs)."""
    if torch.is_tensor(o):
        return [o]
    if hasattr(o, "to_tuple"):
        o = o.to_tuple()
    if isinstance(o, dict):
        return [t for v in o.values() for t in flat(v)]
    if isinstance(o, (list, tuple)):
        return [t for v in o for t in flat(v)]
    return []


def rel_error(out, ref):
    a, b = flat(out), flat(ref)
    assert len(a) == len(b) and a, "outputs differ in structure: %d vs %d tensors" % (len(a), len(b))
    worst = 0.0
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
        if not x.is_floating_point():
            assert torch.equal(x, y)
            continue
        scale = max(y.abs().max().item(), 1e-6)
        worst = max(worst, (x.double() - y.double()).abs().max().item() / scale)
    return worst


def randomize_zero_params(model):
    """Zero-initialised weight matrices (classifier heads) would make outputs
    all zero and the comparison vacuous."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model


def dynamo_counts(model, args, kwargs):
    """torch.compile's graph and break counts (dynamo only, no Inductor);
    None where torch has no dynamo."""
    try:
        import torch._dynamo as dynamo
    except Exception:
        return None
    if not hasattr(dynamo, "explain"):
        return None
    dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = dynamo.explain(model)(*args, **kwargs)
    dynamo.reset()
    return {"graphs": ex.graph_count, "breaks": ex.graph_break_count,
            "reasons": sorted({str(b.reason).splitlines()[0][:120] for b in ex.break_reasons})}


def run_model(name, model, args, kwargs=None, backends=("eager", "ptc"), expect_breaks=(), rtol=RTOL):
    """Compiles `model` under each backend; checks one graph per break + 1,
    the expected break codes, no fallback warnings and the error bound
    (rtol); returns (and records) the report row."""
    kwargs = kwargs or {}
    model = randomize_zero_params(model.eval())
    row = {"model": name}
    with torch.no_grad():
        ref = model(*args, **kwargs)
        for backend in backends:
            ptc.reset()
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ex = ptc.explain(model, backend=backend)(*args, **kwargs)
            seconds = time.perf_counter() - t0
            fallback = [str(w.message) for w in caught if str(w.message).startswith("ptc")]
            assert not fallback, "%s (%s): %s" % (name, backend, fallback)
            assert not ex.autograd_fallback, "%s (%s): ran through torch ops" % (name, backend)
            codes = sorted(b["code"] for b in ex.breaks)
            assert codes == sorted(expect_breaks), "%s (%s): breaks %s" % (name, backend, [
                (b["code"], b["detail"], b["file"], b["line"]) for b in ex.breaks])
            assert ex.graph_count == len(codes) + 1, "%s: %d graphs" % (name, ex.graph_count)
            err = rel_error(ex.result, ref)
            assert err <= rtol, "%s (%s): relative error %.3g" % (name, backend, err)
            row[backend] = {"graphs": ex.graph_count, "breaks": codes, "rel_error": err,
                            "compile_and_first_run_s": round(seconds, 3),
                            "ops": sum(len(o) for o in ex.ops_per_graph),
                            "guards": sum(len(g) for g in ex.guards)}
        if os.environ.get("PTC_MODELS_DYNAMO", "1") != "0":
            row["torch.compile"] = dynamo_counts(model, args, kwargs)
    record(row)
    return row


def record(row):
    build = os.environ.get("PTC_BUILD_DIR")
    if not build:
        return
    os.makedirs(build, exist_ok=True)
    path = os.path.join(build, "models_report.json")
    rows = {}
    if os.path.exists(path):
        try:
            rows = json.load(open(path))
        except ValueError:
            rows = {}
    rows[row["model"]] = row
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
