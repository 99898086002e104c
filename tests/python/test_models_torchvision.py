"""torchvision models captured by ptc: one graph, no breaks, and the same
outputs as eager within 1e-4 (relative to the largest output) in fp32 under
backends "eager" and "ptc"; batch 2, eval mode, weights from the default
initialisation (no downloads). torch.compile's counts (dynamo only) are
recorded next to ptc's in models_report.json.
"""
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from models_common import run_model  # noqa: E402

# name -> input size (the smallest the architecture accepts, or the one it requires)
MODELS = {
    "resnet18": 64, "resnet50": 64, "mobilenet_v2": 64, "mobilenet_v3_large": 64,
    "efficientnet_b0": 64, "densenet121": 64, "squeezenet1_1": 64, "shufflenet_v2_x1_0": 64,
    "regnet_y_400mf": 64, "mnasnet1_0": 64, "convnext_tiny": 64, "vit_b_16": 224, "swin_t": 224,
    "googlenet": 64, "inception_v3": 299,
}
SLOW = {"vit_b_16", "swin_t", "inception_v3", "densenet121", "convnext_tiny"}


def build(name):
    kw = {}
    if name in ("googlenet", "inception_v3"):
        kw = dict(aux_logits=False, init_weights=False)
    torch.manual_seed(0)
    fn = getattr(torchvision.models, name, None)
    if fn is None:
        pytest.skip("torchvision %s has no %s" % (torchvision.__version__, name))
    return fn(**kw)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in MODELS])
def test_torchvision_model(name):
    model = build(name)
    size = MODELS[name]
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    run_model("torchvision." + name, model, (x,))
