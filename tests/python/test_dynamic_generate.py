"""HF GPT-2 generate() compiles at most twice under dynamic=None.

The first call (the prompt) compiles with static sizes. The second call
brings the KV cache the first one filled: tensors the first entry did not
have, sized by the prompt's length, which the input ids had before they
changed to one token. Those cache dims are made symbolic in that second
compile (the recompile reason says so), so the cache growing by a token
per step needs no third compile. On main the second compile kept the cache
static and the third step recompiled (3 compiles)."""
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

import ptc  # noqa: E402


@pytest.fixture(autouse=True)
def _reset():
    ptc.reset()


def compiles(fn):
    handle = getattr(fn, "_ptc_compiled", fn)
    return [e for e in handle._events() if e["kind"] == "compile"]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128,
                       bos_token_id=0, eos_token_id=0)
    return T.GPT2LMHeadModel(cfg).eval()


# 4 and 16 would be ambiguous: a cache of [1, 4 heads, L, 16] has two dims of that size
@pytest.mark.parametrize("prompt", [3, 6, 11])
def test_greedy_generate_compiles_at_most_twice(model, prompt):
    ids = torch.randint(1, 1000, (1, prompt), generator=torch.Generator().manual_seed(prompt))
    want = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    forward = model.forward
    model.forward = ptc.compile(forward)
    try:
        got = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    finally:
        compiled, model.forward = model.forward, forward
    assert torch.equal(got, want)
    events = compiles(compiled)
    assert len(events) <= 2, [e["reason"] for e in events]
    assert "becomes dynamic (sized as L['kwargs']['input_ids'].size(1) was)" in events[1]["reason"]
    assert not [e for e in events if e["break"]], events
