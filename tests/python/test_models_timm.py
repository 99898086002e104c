"""timm models (built from their configs, pretrained=False) captured by ptc:
one graph, no breaks, eager-equal outputs within 1e-4 under backends
"eager" and "ptc"; torch.compile's counts recorded for comparison."""
import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from models_common import run_model  # noqa: E402

MODELS = {"resnet50": 64, "convnext_tiny": 64, "vit_small_patch16_224": 224, "efficientnet_b0": 64}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_timm_model(name):
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False)
    size = MODELS[name]
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    run_model("timm." + name, model, (x,))
