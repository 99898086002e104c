"""ptc under torch.distributed: DistributedDataParallel and FSDP.

ptc never communicates itself: DDP's reducer and FSDP's hooks run as torch
wrote them, between or after ptc's graphs.

DDP. ``ptc.compile(DistributedDataParallel(m))`` runs DDP's own forward
eagerly (its pre- and post-forward: bucket rebuilds, ``no_sync``, unused
parameter search, buffer broadcasts) and compiles only the wrapped module's
forward, as torch.compile does; ``DistributedDataParallel(ptc.compile(m))``
needs nothing more. With compiled autograd (ptc.config.compiled_autograd)
a graph's backward is one autograd node, so its parameters' gradients are
all ready only when it ends and DDP could start no all-reduce before; ptc
therefore cuts the forward's graph where a gradient bucket begins, as
Dynamo's DDPOptimizer splits Dynamo's graph: buckets are filled walking the
parameters in reverse order of use up to DDP's bucket_bytes_cap, and a
forward pre-hook on the module where each bucket begins calls
``ptc._split.graph_cut``. The cut is not a graph break: the graph stays
whole through the user's loop over its blocks (a break there resumed in the
middle of the loop, a new entry per block, past the recompile limit beyond
about 8 blocks), and the training backend compiles it as pieces, one
autograd node each, alike pieces (identical blocks) sharing one program.
ptc cuts between modules, so a module's parameters share one piece. With torch autograd for
the backward (the default) the graphs run op by op under autograd, DDP's
hooks fire per parameter as in eager, and no split is needed.

FSDP. FSDP2's (fully_shard) and FSDP1's hooks are marked
torch.compiler.disable, so ptc's graphs end at each unit's boundary (PTC-B014)
and the all-gathers and reduce-scatters run between them. Parameters are
graph inputs read at each call, never constants baked into a graph.
"""
import sys
import weakref

from . import _notices
from ._split import graph_cut


def _ddp_class():
    """DistributedDataParallel if torch.distributed was imported, else None."""
    mod = sys.modules.get("torch.nn.parallel.distributed")
    return getattr(mod, "DistributedDataParallel", None)


def is_ddp(obj):
    cls = _ddp_class()
    return cls is not None and isinstance(obj, cls)


def _config():
    from ._config import config

    return config


# ---- bucket boundaries -------------------------------------------------------------------------


def _param_bytes(mod, counted):
    """The bytes of mod's own trainable parameters not yet counted (ignored
    parameters are counted from the start); adds them to counted."""
    nbytes = 0
    for p in mod.parameters(recurse=False):
        if p.requires_grad and id(p) not in counted:
            counted.add(id(p))
            nbytes += p.numel() * p.element_size()
    return nbytes


def bucket_plan(module, bucket_cap, ignored=()):
    """The modules whose parameters DDP all-reduces together, as lists of
    module names, last used first: module registration order stands for
    order of use, and a bucket is closed once it holds bucket_cap bytes, as
    DDP's buckets are after their rebuild at the first backward (the first
    bucket's larger cap applies only before it). A parameter shared by
    several modules (GPT-2's tied embedding and output weight) is one
    parameter to DDP: it belongs to the module that registers it first, the
    first to use it in the forward, so its gradient is complete last."""
    counted = set(ignored)
    leaves = [(name, _param_bytes(mod, counted)) for name, mod in module.named_modules()]
    leaves = [(name, size) for name, size in leaves if size > 0]
    buckets, size = [[]], 0
    for name, nbytes in reversed(leaves):
        if size >= bucket_cap and buckets[-1]:
            buckets.append([])
            size = 0
        buckets[-1].append(name)
        size += nbytes
    return [b for b in buckets if b]


def _ignored_params(ddp):
    names = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    return {id(p) for name, p in ddp.module.named_parameters() if name in names}


def install_bucket_splits(ddp, module):
    """Splits module's compiled forward where each of ddp's gradient buckets
    begins (once per DDP; only with compiled autograd). Returns the plan."""
    plan = getattr(ddp, "_ptc_bucket_plan", None)
    if plan is not None:
        return plan
    plan = []
    if _config().compiled_autograd:
        plan = bucket_plan(module, ddp.bucket_bytes_cap, _ignored_params(ddp))
        mods = dict(module.named_modules())
        for k, bucket in enumerate(plan[:-1]):
            start = bucket[-1]  # the bucket's first module in forward order
            reason = "DDP gradient bucket %d of %d begins at %s" % (len(plan) - k, len(plan),
                                                                     start or "the module")
            mods[start].register_forward_pre_hook(_split_hook(reason))
    object.__setattr__(ddp, "_ptc_bucket_plan", plan)
    return plan


def _split_hook(reason):
    def ptc_bucket_split(module, args):
        graph_cut(reason)

    return ptc_bucket_split


# ---- every rank compiles the same graphs ------------------------------------------------------


class RankCheck:
    """Compares this rank's compiles with the other ranks', in order, through
    the process group's key-value store, without waiting: each compile is
    published as ptc/compile/<rank>/<n> (frame, recompile number, reason and
    a hash of the graph and its guards), and the others' published ones are
    compared as they appear. ptc adds no collective, so ranks whose graphs
    differ do not hang (DDP's and FSDP's own collectives run in the same
    order either way); the first difference is one warning naming both
    ranks' compiles and the reason for this rank's (a failed guard, a
    break)."""

    def __init__(self, store, rank, world, group):
        self.store, self.rank, self.world = store, rank, world
        # the default process group whose store this is, weakly: a group
        # destroy_process_group let go of must be freed (its gloo threads
        # joined) then, not at the interpreter's exit
        self.group = weakref.ref(group) if group is not None else lambda: None
        self.mine = []  # this rank's compiles, as published
        self.compared = [0] * world  # per rank: how many of its compiles were compared
        self.reported = False
        self.last_reason = ""

    def __call__(self, ev):
        if self.store is None or not _is_current(self.group):
            self.store = None  # the group was destroyed: its store is let go, nothing published
            return
        if ev.get("kind") == "recompile":
            self.last_reason = "recompile: %s" % ev.get("guard")
            return
        if ev.get("kind") != "compile":
            return
        import hashlib
        import re

        graph = ev.get("graph")
        # less the addresses, which differ per process: printed ones (0x...)
        # and ids used as keys (FSDP2's state: `dict[139813072518112] is None`)
        guards = "\n".join(ev.get("guards") or [])
        guards = re.sub(r"\b[1-9][0-9]{11,}\b", "<id>", re.sub(r"0x[0-9a-fA-F]+", "0x", guards))
        text = _devices_in_order((graph.ptir() if graph is not None else "") + guards)
        brk = ev.get("break") or {}
        record = "%s #%d (%s%s) graph %s" % (
            ev.get("frame"), ev.get("recompile", 0), self.last_reason or ev.get("reason", ""),
            "; ends at " + brk["code"] if brk.get("code") else "",
            hashlib.sha1(text.encode()).hexdigest()[:12])
        self.last_reason = ""
        self.store.set("ptc/compile/%d/%d" % (self.rank, len(self.mine)), record)
        self.mine.append(record)
        self.compare()

    def compare(self):
        for other in range(self.world):
            while other != self.rank and not self.reported and self.compared[other] < len(self.mine):
                n = self.compared[other]
                key = "ptc/compile/%d/%d" % (other, n)
                if not self.store.check([key]):
                    break
                theirs = self.store.get(key).decode()
                self.compared[other] += 1
                if theirs.split(" graph ")[-1] != self.mine[n].split(" graph ")[-1]:
                    self.reported = True
                    import warnings

                    warnings.warn("ptc: rank %d's compile %d differs from rank %d's: rank %d "
                                  "compiled %s; rank %d compiled %s. The ranks run different "
                                  "graphs (results stay right: ptc adds no collective)."
                                  % (self.rank, n, other, self.rank, self.mine[n], other, theirs),
                                  UserWarning, stacklevel=2)


def _devices_in_order(text):
    """text with each CUDA device named by the order it first appears in
    (cuda:#0, cuda:#1, ...): NCCL ranks run the same graph, each on its own
    GPU (cuda:<rank>), which is no difference between them."""
    import re

    seen = {}
    return re.sub(r"\bcuda:(\d+)", lambda m: "cuda:#%d" % seen.setdefault(m.group(1), len(seen)),
                  text)


def _is_current(group):
    """Whether group (a weak reference) is still torch.distributed's default
    process group (destroy_process_group, or a new init_process_group, ends
    that)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_initialized() and dist.group.WORLD is group()


def watch_ranks():
    """Installs the RankCheck when a process group of 2+ ranks is up: once
    per default group, so a group made after another was destroyed is
    watched through its own store, and a destroyed group's store is not
    kept (RankCheck lets it go at its next event)."""
    dist = sys.modules.get("torch.distributed")
    check = getattr(watch_ranks, "check", None)
    if dist is None or not dist.is_available() or not dist.is_initialized() or \
            dist.get_world_size() < 2 or (check is not None and _is_current(check.group)):
        return
    from . import _C

    store = dist.distributed_c10d._get_default_store()
    watch_ranks.check = RankCheck(store, dist.get_rank(), dist.get_world_size(), dist.group.WORLD)
    _C._set_compile_observer(watch_ranks.check)


# ---- FSDP1 -----------------------------------------------------------------------------------

# FSDP1's forward runs these around each unit's module; unlike FSDP2's hooks
# they are not marked torch.compiler.disable (Dynamo traces FSDP1 through its
# own rules), and tracing into them leaves state ptc cannot rebuild, which
# would run the whole unit eagerly. Run for real, they end the graphs at the
# unit's boundaries (PTC-B014) and the unit's own module is compiled.
_FSDP1_RUNTIME = ("_root_pre_forward", "_pre_forward", "_post_forward")


def prepare_fsdp1(module):
    """Marks FSDP1's per-unit runtime functions ptc.disable when module holds
    an FSDP1 unit (once per process)."""
    fsdp = sys.modules.get("torch.distributed.fsdp.fully_sharded_data_parallel")
    cls = getattr(fsdp, "FullyShardedDataParallel", None)
    if cls is None or getattr(prepare_fsdp1, "done", False):
        return
    if not any(isinstance(m, cls) for m in module.modules()):
        return
    from . import _C

    for name in _FSDP1_RUNTIME:
        _C._disable(getattr(fsdp, name))
    prepare_fsdp1.done = True


# ---- the two ways of combining DDP and ptc.compile --------------------------------------------


def wrap_ddp(ddp, compile_module):
    """ptc.compile(DDP(m)): DDP's forward stays eager; m's forward is compiled
    by compile_module(m). The wrapper shares ddp's __dict__ (parameters,
    reducer, hooks are the same objects)."""
    from ._module import sharing_wrapper

    if getattr(ddp, "_delay_all_reduce_all_params", False):
        _notices.not_acted_on("DDP with every parameter's all-reduce delayed calls the module's "
                              "forward directly: ptc does not compile it.")
    inner = compile_module(ddp.module)

    def _run_ddp_forward(self, *inputs, **kwargs):
        if self._use_python_reducer:
            return inner(*inputs, **kwargs)
        install_bucket_splits(self, self.module)
        with self._inside_ddp_forward():
            return inner(*inputs, **kwargs)

    return sharing_wrapper(ddp, {"_run_ddp_forward": _run_ddp_forward,
                                 "_ptc_compiled": inner._ptc_compiled})


def ddp_aware(compiled):
    """DDP(ptc.compile(m)): the compiled call, which splits the graphs at the
    buckets of the DDP running it (DDP marks itself active around the call).
    Unless a process group is initialised when compiling, compiled itself:
    other programs pay nothing."""
    cls = _ddp_class()
    dist = sys.modules.get("torch.distributed")
    if cls is None or not hasattr(cls, "_active_ddp_module") or dist is None or \
            not dist.is_available() or not dist.is_initialized():
        return compiled

    def call(*args, **kwargs):
        ddp = cls._active_ddp_module
        if ddp is not None and getattr(ddp, "_ptc_bucket_plan", None) is None:
            install_bucket_splits(ddp, ddp.module)
        return compiled(*args, **kwargs)

    return call
