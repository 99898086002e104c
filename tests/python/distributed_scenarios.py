"""What each rank runs in test_distributed.py (see distributed_common.spawn).

Each scenario trains an eager reference and ptc's compiled copy of one model
side by side, from the same initial weights on the same per-rank data, and
returns numbers (largest differences, graph counts, event orders) for the
test to judge; each rank's inputs differ, so gradients only agree if the
all-reduce happened.
"""
import contextlib
import copy

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ptc

DEVICE = torch.device("cpu")  # cuda:<rank> under NCCL (distributed_common); FSDP1
# needs it named even on the CPU, where it asks for an accelerator otherwise
BUCKET_CAP_MB = 600 / 2**20  # 600 bytes: the MLP's three linears make two DDP buckets


class MLP(torch.nn.Module):
    def __init__(self, skip_middle=False):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 16)
        self.fc3 = torch.nn.Linear(16, 4)
        self.skip_middle = skip_middle

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if not self.skip_middle:
            h = torch.tanh(self.fc2(h))
        return self.fc3(h)


def mlp(skip_middle=False):
    torch.manual_seed(0)
    return MLP(skip_middle).to(DEVICE)


def batches(rank, steps, shape=(5, 8)):
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(*shape, generator=g).to(DEVICE) for _ in range(steps)]


def max_diff(xs, ys):
    worst = 0.0
    for a, b in zip(xs, ys):
        if (a is None) != (b is None):
            return float("inf")
        if a is not None and a.numel():  # FSDP1: a parameter held by another rank is empty here
            a = a.full_tensor() if hasattr(a, "full_tensor") else a
            b = b.full_tensor() if hasattr(b, "full_tensor") else b
            worst = max(worst, (a.detach() - b.detach()).abs().max().item())
    return worst


def grads(model):
    return [p.grad for p in model.parameters()]


def train_pair(ref, compiled, params_of, rank, steps=10, lr=0.05, loss=lambda out: out.square().mean()):
    """Trains both with SGD; returns the largest loss, gradient and parameter
    differences over the steps."""
    opt_r = torch.optim.SGD(ref.parameters(), lr=lr)
    opt_c = torch.optim.SGD(params_of(compiled), lr=lr)
    worst = {"loss": 0.0, "grad": 0.0, "param": 0.0}
    for x in batches(rank, steps):
        lr_ = loss(ref(x))
        lc = loss(compiled(x))
        lr_.backward()
        lc.backward()
        worst["loss"] = max(worst["loss"], abs(lr_.item() - lc.item()))
        worst["grad"] = max(worst["grad"], max_diff(grads(ref), [p.grad for p in params_of(compiled)]))
        opt_r.step()
        opt_c.step()
        opt_r.zero_grad()
        opt_c.zero_grad()
        worst["param"] = max(worst["param"], max_diff(list(ref.parameters()), list(params_of(compiled))))
    return worst


def graph_events(compiled):
    return [(e["kind"], (e.get("break") or {}).get("code")) for e in compiled._events()
            if e["kind"] == "compile"]


def pieces_events(compiled):
    """Per graph compiled in pieces (cut at DDP's buckets): (pieces, distinct programs)."""
    return [(e["pieces"], e["programs"]) for e in compiled._events() if e["kind"] == "graph_pieces"]


# ---- DDP ------------------------------------------------------------------------------------


def ddp_forms(make, bucket_cap_mb):
    """Both ways of combining DDP and ptc.compile, with torch's autograd and
    with compiled autograd (set in ptc.config while each is used): per case
    ("outer/torch", ...), an eager DDP of make(), ptc's, and the ptc-compiled
    object that holds the compile events."""
    for autograd in (False, True):
        ptc.config.compiled_autograd = autograd
        for form in ("outer", "inner"):
            ref = DDP(make(), bucket_cap_mb=bucket_cap_mb)
            if form == "outer":
                compiled = handle = ptc.compile(DDP(make(), bucket_cap_mb=bucket_cap_mb))
            else:
                compiled = DDP(ptc.compile(make()), bucket_cap_mb=bucket_cap_mb)
                handle = compiled.module
            yield "%s/%s" % (form, "compiled" if autograd else "torch"), ref, compiled, handle
            ptc.reset()


def ddp_matches_eager(rank, world, tmp):
    """Both ways of combining DDP and ptc.compile, with torch's autograd and
    with compiled autograd, against eager DDP over 10 SGD steps."""
    out = {}
    for case, ref, compiled, _ in ddp_forms(mlp, BUCKET_CAP_MB):
        out[case] = train_pair(ref, compiled, lambda m: list(m.parameters()), rank)
    return out


def eager_bucket_bytes(rank):
    """The sizes of eager DDP's gradient buckets once rebuilt (in the forward
    after the first backward)."""
    ddp = DDP(mlp(), bucket_cap_mb=BUCKET_CAP_MB)
    for x in batches(rank, 3):
        ddp(x).sum().backward()
    return [int(n) for n in ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(",")]


def ddp_buckets(rank, world, tmp):
    """With compiled autograd: one graph per gradient bucket (the buckets
    eager DDP makes), and a bucket's all-reduce is issued before the
    backward reaches the input."""
    ptc.config.compiled_autograd = True
    out = {}
    for form in ("outer", "inner"):
        model = mlp()
        if form == "outer":
            ddp = ptc.compile(DDP(model, bucket_cap_mb=BUCKET_CAP_MB))
            compiled = ddp
        else:
            ddp = DDP(ptc.compile(model), bucket_cap_mb=BUCKET_CAP_MB)
            compiled = ddp.module
        order = record_allreduces(ddp, world)
        orders = []
        for x in batches(rank, 3):
            x.requires_grad_(True)
            x.register_hook(lambda g: order.append("input grad"))
            del order[:]
            ddp(x).sum().backward()
            orders.append(list(order))
        out[form] = {
            "graphs": graph_events(compiled._ptc_compiled),
            "pieces": pieces_events(compiled._ptc_compiled),
            "plan": ddp._ptc_bucket_plan,
            "plan_bytes": [sum(p.numel() * p.element_size() for name in bucket
                               for p in model.get_submodule(name).parameters()) for bucket in ddp._ptc_bucket_plan],
            "eager_bytes": eager_bucket_bytes(rank),
            "orders": orders,
        }
        ptc.reset()
    return out


def train_accumulating(ref, compiled, rank, steps=6, lr=0.05):
    """Like train_pair, with every other step's gradients accumulated under
    no_sync() and synchronised by the next step."""
    opt_r = torch.optim.SGD(ref.parameters(), lr=lr)
    opt_c = torch.optim.SGD(compiled.parameters(), lr=lr)
    worst = {"loss": 0.0, "grad": 0.0, "param": 0.0, "unsynced": 0.0}
    for step, x in enumerate(batches(rank, steps)):
        accumulate = step % 2 == 0
        for model in (ref, compiled):
            with model.no_sync() if accumulate else contextlib.nullcontext():
                loss = model(x).square().mean()
                loss.backward()
        worst["grad"] = max(worst["grad"], max_diff(grads(ref), grads(compiled)))
        if accumulate:  # the local gradients differ between ranks until the synced step
            g = compiled.module.fc1.weight.grad.clone()
            dist.all_reduce(g)
            worst["unsynced"] = max(worst["unsynced"], (g / world_size() - compiled.module.fc1.weight.grad).abs().max().item())
            continue
        step_both((opt_r, opt_c), ref, compiled, worst)
    return worst


def world_size():
    return dist.get_world_size()


def step_both(optimizers, ref, compiled, worst):
    """A step of both models' optimizers; the largest parameter difference
    so far in worst["param"]."""
    for opt in optimizers:
        opt.step()
        opt.zero_grad()
    worst["param"] = max(worst["param"], max_diff(list(ref.parameters()), list(compiled.parameters())))


def ddp_modes(rank, world, tmp):
    """find_unused_parameters (a layer the forward skips), static_graph and
    no_sync() accumulation, with torch's autograd and compiled autograd,
    against eager DDP."""
    out = {}
    for autograd in (False, True):
        ptc.config.compiled_autograd = autograd
        tag = "compiled" if autograd else "torch"
        kw = dict(bucket_cap_mb=BUCKET_CAP_MB, find_unused_parameters=True)
        out["find_unused/" + tag] = train_pair(DDP(mlp(skip_middle=True), **kw),
                                               ptc.compile(DDP(mlp(skip_middle=True), **kw)),
                                               lambda m: list(m.parameters()), rank)
        kw = dict(bucket_cap_mb=BUCKET_CAP_MB, static_graph=True)
        out["static_graph/" + tag] = train_pair(DDP(mlp(), **kw), ptc.compile(DDP(mlp(), **kw)),
                                                lambda m: list(m.parameters()), rank)
        kw = dict(bucket_cap_mb=BUCKET_CAP_MB)
        out["no_sync/" + tag] = train_accumulating(DDP(mlp(), **kw), ptc.compile(DDP(mlp(), **kw)), rank)
        ptc.reset()
    return out


# ---- FSDP -----------------------------------------------------------------------------------


def fsdp2_mlp():
    from torch.distributed.fsdp import fully_shard

    model = mlp()
    for layer in (model.fc1, model.fc2, model.fc3):
        fully_shard(layer)
    fully_shard(model)
    return model


def fsdp_against_eager(make, rank):
    """make()'s FSDP model compiled against eager over 10 SGD steps with both
    autograd paths, with its graph count and break codes."""
    out = {}
    for autograd in (False, True):
        ptc.config.compiled_autograd = autograd
        compiled = ptc.compile(make())
        worst = train_pair(make(), compiled, lambda m: list(m.parameters()), rank)
        events = compiled._ptc_compiled._events()
        worst["graphs"] = sum(1 for e in events if e["kind"] == "compile" and e.get("graph") is not None)
        worst["breaks"] = sorted({(e.get("break") or {}).get("code") or "" for e in events} - {""})
        out["compiled" if autograd else "torch"] = worst
        ptc.reset()
    return out


def fsdp2(rank, world, tmp):
    """FSDP2 (fully_shard per linear and at the root) against eager FSDP2;
    the graphs end at each unit's hooks (PTC-B014) and no parameter is a
    graph constant."""
    return fsdp_against_eager(fsdp2_mlp, rank)


def fsdp1_mlp():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    model = mlp()
    for name in ("fc1", "fc2", "fc3"):
        setattr(model, name, FSDP(getattr(model, name), use_orig_params=True, device_id=DEVICE))
    return FSDP(model, use_orig_params=True, device_id=DEVICE)


def fsdp1(rank, world, tmp):
    """FSDP1 with use_orig_params=True (one unit per linear and the root)
    against eager FSDP1, as fsdp2."""
    return fsdp_against_eager(fsdp1_mlp, rank)


# ---- several processes: one cache folder, a trace folder per rank ----------------------------


def shared_cache(rank, world, tmp):
    """Both ranks compile the same model at the same moment into one
    PTC_CACHE_DIR (set by the test) and then, after ptc.reset(), again:
    results equal eager's both times. The ranks compile the same graphs, so
    ptc's comparison of the ranks' compiles warns of nothing."""
    import os
    import warnings

    ptc.config.compiled_autograd = True
    out = {"diff": 0.0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for round_ in range(2):
            dist.barrier()
            model = DDP(mlp(), bucket_cap_mb=BUCKET_CAP_MB)
            compiled = ptc.compile(DDP(mlp(), bucket_cap_mb=BUCKET_CAP_MB))
            x = batches(rank, 1)[0]
            y = compiled(x)
            y.sum().backward()
            model(x).sum().backward()
            out["diff"] = max(out["diff"], (y - model(x)).abs().max().item(),
                              max_diff(grads(model), grads(compiled)))
            ptc.reset()
        dist.barrier()
        ptc.compile(mlp())(batches(rank, 1)[0])  # a compile after all of the other rank's
        dist.barrier()  # the listing below sees both ranks' last writes finished
    out["rank_warnings"] = [str(w.message) for w in caught if "rank" in str(w.message)]
    out["cache"] = sorted(os.listdir(os.environ["PTC_CACHE_DIR"]))
    return out


def diverging_compiles(rank, world, tmp):
    """Rank r's batch has 5 + r rows (static sizes): the ranks compile
    different graphs, which is reported, and training goes on."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = ptc.compile(mlp(), dynamic=False)
        compiled(batches(rank, 1, shape=(5 + rank, 8))[0])
        dist.barrier()
        compiled(batches(rank, 1, shape=(3, 8))[0])  # a compile after the other rank's first
        dist.all_reduce(torch.ones(1, device=DEVICE))  # the ranks still talk: no hang
    return [str(w.message) for w in caught if "rank" in str(w.message)]


def regroup(rank, world, tmp):
    """A compile under the first process group, then the group destroyed and
    a new one made through another FileStore, and a compile under it: the
    new group's store holds this rank's compile, and the ranks' comparison
    warns of nothing."""
    import datetime
    import os
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ptc.compile(mlp())(batches(rank, 1)[0])
        dist.barrier()
        dist.destroy_process_group()
        path = os.path.join(str(tmp), "store_regroup")
        dist.init_process_group("gloo", rank=rank, world_size=world, init_method="file://" + path,
                                timeout=datetime.timedelta(seconds=300))
        ptc.compile(mlp(skip_middle=True))(batches(rank, 1)[0])
        store = dist.distributed_c10d._get_default_store()
        key = "ptc/compile/%d/0" % rank
        published = store.check([key]) and store.get(key).decode()
        dist.barrier()
    return {"published": published or "", "warnings": [str(w.message) for w in caught if "rank" in str(w.message)]}


# ---- GPT-2 under DDP ------------------------------------------------------------------------

GPT2_BUCKET_CAP_MB = 20000 / 2**20  # 20 kB: a few buckets across the blocks


def gpt2(n_layer=2):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=n_layer, n_embd=32, n_head=2, vocab_size=64, n_positions=16, resid_pdrop=0,
                     embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0, use_cache=False)
    return GPT2LMHeadModel(cfg).to(DEVICE)


def gpt2_batches(rank, steps):
    g = torch.Generator().manual_seed(200 + rank)
    return [torch.randint(0, 64, (2, 12), generator=g).to(DEVICE) for _ in range(steps)]


def gpt2_loss(model, ids):
    logits = model(ids).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             ids[:, 1:].reshape(-1))


def record_allreduces(ddp, world):
    """A comm hook that all-reduces as DDP's default does and notes each
    bucket's all-reduce in the list it returns."""
    order = []

    def hook(state, bucket):
        order.append("allreduce")
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0] / world)

    ddp.register_comm_hook(None, hook)
    return order


def note_graph_backwards(loss, order):
    """Notes in order when the backward of each of ptc's compiled graphs
    (one autograd node each) behind loss starts."""
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() == "CompiledFunctionBackward":
            node.register_prehook(lambda grads: order.append("graph backward"))
        todo.extend(next_node for next_node, _ in node.next_functions)


def train_gpt2_pair(ref, compiled, rank, order, steps=10, lr=0.1):
    """train_pair for GPT-2 with its next-token loss. The loss and gradient
    differences are relative to the loss and the largest gradient; also,
    per step, the all-reduces issued before the backward of the last
    compiled graph to run (the first graph's) began (order: see
    record_allreduces)."""
    opt_r = torch.optim.SGD(ref.parameters(), lr=lr)
    opt_c = torch.optim.SGD(compiled.parameters(), lr=lr)
    worst = {"loss": 0.0, "grad": 0.0, "param": 0.0, "early_allreduces": []}
    for ids in gpt2_batches(rank, steps):
        del order[:]
        lr_, lc = gpt2_loss(ref, ids), gpt2_loss(compiled, ids)
        note_graph_backwards(lc, order)
        lr_.backward()
        lc.backward()
        last = len(order) - order[::-1].index("graph backward") if "graph backward" in order else 0
        worst["early_allreduces"].append(order[:last].count("allreduce"))
        scale = max(max_diff([g], [torch.zeros_like(g)]) for g in grads(ref) if g is not None)
        worst["loss"] = max(worst["loss"], abs(lr_.item() - lc.item()) / abs(lr_.item()))
        worst["grad"] = max(worst["grad"], max_diff(grads(ref), grads(compiled)) / scale)
        step_both((opt_r, opt_c), ref, compiled, worst)
    return worst


def plan_bytes(model, plan):
    """The bytes of each bucket of ptc's plan, a parameter counted once."""
    seen, sizes = set(), []
    for bucket in plan:
        sizes.append(0)
        for name in bucket:
            for p in model.get_submodule(name).parameters(recurse=False):
                if id(p) not in seen:
                    seen.add(id(p))
                    sizes[-1] += p.numel() * p.element_size()
    return sizes


def graph_summary(compiled):
    """The break code each graph of a ptc-compiled model ends at (None: the
    last), the fallbacks it took, its recompiles (and recompile limits hit),
    and (pieces, programs) per graph compiled in pieces."""
    events = compiled._ptc_compiled._events()
    return {"graphs": [(e.get("break") or {}).get("code") for e in events
                       if e["kind"] == "compile" and e.get("graph") is not None],
            "fallbacks": [e["kind"] for e in events if "fallback" in e["kind"]],
            "recompiles": [e["kind"] for e in events if e["kind"].startswith("recompile")],
            "pieces": pieces_events(compiled._ptc_compiled)}


def gpt2_ddp(rank, world, tmp):
    """A 2-layer GPT-2 under DDP in both forms, with torch's autograd and with
    compiled autograd, against eager DDP over 10 SGD steps; with compiled
    autograd, the graphs of the forward and the bucket plan."""
    out = {}
    for case, ref, compiled, handle in ddp_forms(gpt2, GPT2_BUCKET_CAP_MB):
        out[case] = train_gpt2_pair(ref, compiled, rank, record_allreduces(compiled, world))
        out[case].update(graph_summary(handle))
        out[case]["plan_bytes"] = plan_bytes(compiled.module, getattr(compiled, "_ptc_bucket_plan", []))
        out[case]["eager_bytes"] = [int(n) for n in ref._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(",")]
    return out


def gpt2_deep_ddp(rank, world, tmp):
    """A 12-layer GPT-2 under DDP with compiled autograd, both wrap orders, a
    gradient bucket per block (the cap is one block's bytes), against eager
    DDP over 10 SGD steps: the graphs, recompiles, pieces and the warnings
    (a cut inside the loop over the blocks must not make a graph per block)."""
    import warnings

    ptc.config.compiled_autograd = True
    block_bytes = sum(p.numel() * p.element_size() for p in gpt2(1).transformer.h[0].parameters())
    cap_mb = block_bytes / 2**20
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for form in ("outer", "inner"):
            ref = DDP(gpt2(12), bucket_cap_mb=cap_mb)
            if form == "outer":
                compiled = handle = ptc.compile(DDP(gpt2(12), bucket_cap_mb=cap_mb))
            else:
                compiled = DDP(ptc.compile(gpt2(12)), bucket_cap_mb=cap_mb)
                handle = compiled.module
            out[form] = train_gpt2_pair(ref, compiled, rank, record_allreduces(compiled, world))
            out[form].update(graph_summary(handle))
            out[form]["buckets"] = len(compiled._ptc_bucket_plan)
            ptc.reset()
    out["warnings"] = [str(w.message) for w in caught]
    return out


def gpt2_fsdp2_model():
    from torch.distributed.fsdp import fully_shard

    model = gpt2()
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    return model


def gpt2_fsdp2(rank, world, tmp):
    """A 2-layer GPT-2 under FSDP2 (a unit per block and one at the root)
    compiled against eager FSDP2 over 10 SGD steps with both autograd paths;
    the graphs and their breaks; ptc's comparison of the ranks' compiles
    (the same on both: FSDP2's id-keyed guards aside) warns of nothing."""
    import warnings

    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for autograd in (False, True):
            ptc.config.compiled_autograd = autograd
            compiled = ptc.compile(gpt2_fsdp2_model())
            case = "compiled" if autograd else "torch"
            out[case] = train_gpt2_pair(gpt2_fsdp2_model(), compiled, rank, [])
            out[case].update(graph_summary(compiled))
            ptc.reset()
    out["rank_warnings"] = [str(w.message) for w in caught if "differs from rank" in str(w.message)]
    return out


# ---- the gradient-layout contract -----------------------------------------------------------


class ConvNet(torch.nn.Module):
    """Convolutions with a 1x1 one, whose [C, K, 1, 1] weight's strides are
    ambiguous in its size-1 dims, batch norm and a linear head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.proj = torch.nn.Conv2d(8, 16, 1)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.proj(h).mean((2, 3)))


def conv_net(memory_format):
    torch.manual_seed(0)
    return ConvNet().to(DEVICE).to(memory_format=memory_format)


def ddp_grad_layout(rank, world, tmp):
    """DDP of a ptc-compiled conv net under compiled autograd beside eager
    DDP of the same net, parameters channels-last and contiguous, 3 SGD
    steps: the warnings DDP gave about gradient strides (torch gives "Grad
    strides do not match bucket view strides" once per process, so ptc's
    backward runs first in each step), the largest gradient and parameter
    differences from eager's, and whether every .grad's strides were
    eager's."""
    import warnings

    ptc.config.compiled_autograd = True
    out = {"warnings": [], "worst": {}, "strides_differ": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for fmt, memory_format in (("channels_last", torch.channels_last),
                                   ("contiguous", torch.contiguous_format)):
            compiled = DDP(ptc.compile(conv_net(memory_format)))
            ref = DDP(conv_net(memory_format))
            opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (compiled, ref)]
            worst = {"grad": 0.0, "param": 0.0}
            for x in batches(rank, 3, shape=(2, 3, 8, 8)):
                compiled(x).square().mean().backward()
                ref(x).square().mean().backward()
                worst["grad"] = max(worst["grad"], max_diff(grads(ref), grads(compiled)))
                out["strides_differ"] += [
                    (fmt, name, p.grad.stride(), q.grad.stride())
                    for (name, p), q in zip(compiled.module.named_parameters(), ref.parameters())
                    if p.grad.stride() != q.grad.stride()]
                step_both(opts, ref, compiled, worst)
            out["worst"][fmt] = worst
            ptc.reset()
    out["warnings"] = [str(w.message) for w in caught if "strides" in str(w.message)]
    return out


# ---- several scenarios in one job ------------------------------------------------------------


def several(rank, world, tmp):
    """The scenarios named in PTC_TEST_SCENARIOS (comma-separated), one after
    another in these processes (one start of the ranks, CUDA and NCCL for
    all): {name: its result, or {"error": the traceback}}. A scenario that
    raised on one rank may leave the other waiting in a collective, which
    the process group's timeout ends."""
    import os
    import traceback

    out = {}
    for name in os.environ["PTC_TEST_SCENARIOS"].split(","):
        try:
            out[name] = globals()[name](rank, world, tmp)
        except Exception:
            out[name] = {"error": traceback.format_exc()}
        ptc.reset()
        dist.barrier()
    return out
