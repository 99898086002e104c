"""Whole models compiled by ptc.compile on CUDA tensors against eager PyTorch.

The benchmark's models (torchvision resnet50, mobilenet_v3_large,
convnext_tiny, vit_b_16; timm and Hugging Face BERT / GPT-2 where installed),
built from configs with random weights at a small batch, run in fp32 and
under bf16 autocast. ptc's output must match eager's: relative error
||ptc - eager|| / ||eager|| below 1e-3 in fp32 and 2e-2 under bf16 (eager
itself rounds differently there: every op in bf16 against ptc's fused f32
arithmetic). The compiled run must really be ptc's CUDA backend, not a
fallback: PTC_STRICT=1 turns any fallback into an error. Skips without a
GPU, without the ptc Python module, or without torch 2's CUDA support.
"""
import os

import pytest

torch = pytest.importorskip("torch")

TOL = {"fp32": 1e-3, "bf16": 2e-2}


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
    os.environ["PTC_STRICT"] = "1"
    os.environ["PTC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


def build(name):
    torch.manual_seed(0)
    if name in ("resnet50", "mobilenet_v3_large", "convnext_tiny", "vit_b_16"):
        tv = pytest.importorskip("torchvision")
        m = getattr(tv.models, name)()
        if name == "vit_b_16":  # torchvision zero-initialises the head: outputs would all be 0
            torch.nn.init.normal_(m.heads.head.weight, std=0.02)
        return m, (torch.randn(2, 3, 224, 224),)
    if name == "timm_resnet18":
        timm = pytest.importorskip("timm")
        return timm.create_model("resnet18", pretrained=False), (torch.randn(2, 3, 160, 160),)
    tr = pytest.importorskip("transformers")
    if name == "bert":
        cfg = tr.BertConfig(num_hidden_layers=2)
        return tr.BertModel(cfg), (torch.randint(0, cfg.vocab_size, (2, 64)),)
    cfg = tr.GPT2Config(n_layer=2)
    return tr.GPT2Model(cfg), (torch.randint(0, cfg.vocab_size, (2, 64)),)


def first(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "keys"):
        return first(list(out.values())[0])
    return first(out[0])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v3_large", "convnext_tiny", "vit_b_16",
                                  "timm_resnet18", "bert", "gpt2"])
def test_model_matches_eager(name, dtype):
    import contextlib

    import ptc
    model, args = build(name)
    model = model.eval().cuda()
    args = tuple(a.cuda() for a in args)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
    compiled = ptc.compile(model)
    with torch.no_grad(), ctx:
        want = first(model(*args)).double()
        got = first(compiled(*args))
        assert got.is_cuda
        got2 = first(compiled(*args)).double()  # the cached entry, second run
    err = (got.double() - want).norm().item() / max(want.norm().item(), 1e-30)
    err2 = (got2 - want).norm().item() / max(want.norm().item(), 1e-30)
    assert err < TOL[dtype] and err2 < TOL[dtype], "%s %s: relative error %.2e / %.2e" % (name, dtype, err, err2)
    assert torch.isfinite(got).all()
