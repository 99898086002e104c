"""Running a scenario on N ranks for the distributed tests.

spawn(scenario, world, tmp) starts `world` processes (torch.multiprocessing,
spawn), each joins a gloo process group (NCCL, a GPU per rank, with
PTC_TEST_BACKEND=nccl in env) through a FileStore in tmp, runs
distributed_scenarios.<scenario>(rank, world, tmp) and writes what it returns
as JSON; spawn returns the ranks' results in rank order. A rank that raises
fails the test with its traceback; ranks that do not finish within `timeout`
seconds are killed and the test fails saying so (a hang is a failure, not a
stuck CI); a collective that waits longer than `collective_timeout` seconds
fails in the rank itself (the process group's timeout: NCCL's watchdog
aborts the rank, gloo raises).

The ranks meet through a file, not a TCP port: a port picked free here and
bound later by rank 0 could be taken in between by another test's ranks
running beside it under ctest -j2.

A rank that finished ends with os._exit, once its result is written and its
process group destroyed, without Python's interpreter finalization: a gloo
worker thread (pt_gloo_runloop) can still be dropping its last collective's
work after the main thread was told the collective is done, and a tensor of
that work whose Python object Python had already let go of (torch keeps such
an object alive, owned by the tensor) needs the GIL to be freed. Once the
main thread is finalizing, CPython ends any other thread that asks for the
GIL with pthread_exit, whose unwinding through torch's noexcept destructors
calls std::terminate: "terminate called without an active exception",
SIGABRT, no Python frame (the FSDP2 tests lost a rank this way about once in
9 fresh-clone CI runs). destroy_process_group does not join those threads
here: once torch._dynamo is imported while a group is up (by FSDP2, by an
optimizer's step; not by ptc, test_distributed.py checks) torch keeps that
group alive to the end of the process. A rank that raised exits as usual,
with its traceback.
"""
import datetime
import faulthandler
import json
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_on_a_free_port(run, tries=5):
    """run(port) -> CompletedProcess, again on another port while the port
    was taken between free_port() closing it and the process binding it
    (another test process on the machine can take it: EADDRINUSE)."""
    for _ in range(tries - 1):
        r = run(free_port())
        if r.returncode == 0 or "EADDRINUSE" not in (r.stdout or "") + (r.stderr or ""):
            return r
    return run(free_port())


def _rank_main(rank, world, store, scenario, tmp, env, collective_timeout):
    faulthandler.enable(all_threads=True)  # a rank that aborts shows its threads' stacks
    os.environ.update(env)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    import torch
    import torch.distributed as dist

    import distributed_scenarios

    torch.set_num_threads(1)
    backend = os.environ.get("PTC_TEST_BACKEND", "gloo")
    options = {"timeout": datetime.timedelta(seconds=collective_timeout),
               "init_method": "file://" + store}
    if backend == "nccl":  # a GPU per rank, bound to the group (NCCL's communicator made at once)
        torch.cuda.set_device(rank)
        distributed_scenarios.DEVICE = options["device_id"] = torch.device("cuda", rank)
    dist.init_process_group(backend, rank=rank, world_size=world, **options)
    try:

        result = getattr(distributed_scenarios, scenario)(rank, world, tmp)
        with open(os.path.join(tmp, "result_%d.json" % rank), "w") as f:
            json.dump(result, f)
        # no rank tears its connections down while another still has a
        # collective in flight with it (FSDP2's last reduce-scatter)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _exit_without_finalizing()


def _exit_without_finalizing():
    """Ends a rank whose work is done (see the module's docstring)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(scenario, tmp, world=2, timeout=600, env=None, collective_timeout=300):
    import torch.multiprocessing as mp

    tmp = str(tmp)
    store = os.path.join(tmp, "store_%d" % time.monotonic_ns())  # new for each spawn
    ctx = mp.start_processes(_rank_main, args=(world, store, scenario, tmp, dict(env or {}),
                                               collective_timeout),
                             nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            raise AssertionError("%s: ranks still running after %d s (a hang)" % (scenario, timeout))
    results = []
    for rank in range(world):
        with open(os.path.join(tmp, "result_%d.json" % rank)) as f:
            results.append(json.load(f))
    return results
