"""Hugging Face models built from small configs (no downloads) captured by
ptc: BERT, GPT-2, T5, DistilBERT and ViT, one graph and no breaks each,
every output tensor within 1e-4 of eager under backends "eager" and "ptc";
torch.compile's counts recorded for comparison. T5 runs without its KV
cache: building the cache deep-copies the config, a graph break under
torch.compile as well (ptc reports PTC-B006 there)."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from models_common import run_model  # noqa: E402


def ids(*shape, high=1000, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


def build(name):
    torch.manual_seed(0)
    T = transformers
    if name == "bert":
        cfg = T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                           vocab_size=1000)
        return T.BertModel(cfg), {"input_ids": ids(2, 16), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
    if name == "gpt2":
        cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64,
                           bos_token_id=0, eos_token_id=0)
        return T.GPT2LMHeadModel(cfg), {"input_ids": ids(2, 16), "use_cache": False}
    if name == "t5":
        cfg = T.T5Config(num_layers=2, num_decoder_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128,
                         vocab_size=1000)
        return T.T5Model(cfg), {"input_ids": ids(2, 16), "decoder_input_ids": ids(2, 8, seed=1), "use_cache": False}
    if name == "distilbert":
        cfg = T.DistilBertConfig(n_layers=2, dim=64, n_heads=4, hidden_dim=128, vocab_size=1000)
        return T.DistilBertModel(cfg), {"input_ids": ids(2, 16)}
    if name == "vit":
        cfg = T.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                          image_size=32, patch_size=8)
        return T.ViTModel(cfg), {"pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))}
    raise KeyError(name)


@pytest.mark.parametrize("name", ["bert", "gpt2", "t5", "distilbert", "vit"])
def test_hf_model(name):
    model, kwargs = build(name)
    run_model("transformers." + name, model, (), kwargs)
