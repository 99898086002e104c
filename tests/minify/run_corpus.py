#!/usr/bin/env python3
"""ptminify's corpus: planted bugs in real graphs, minimised and re-checked.

Each case plants one bug with PTC_INJECT in a real model's graph
(tests/data/minify: torchvision resnet18, a 4-layer BERT) and runs ptminify
on it. A case passes when ptminify exits 0, the result has at most
`max_nodes` nodes, and `ptminify --reproduce` on the output folder, run
without PTC_INJECT in the environment (the folder's repro.json carries it),
shows the same signature. Special cases check that a failure which needs the
whole graph leaves the original as it is, and that a graph that does not fail
is refused with exit status 2.

Also the benchmark: a table of tests made and wall time per case, and with
--json FILE the same as JSON.

  run_corpus.py [--ptminify EXE] [--jobs 2] [--only NAME] [--json FILE] [--keep DIR]

PTMINIFY_BACKEND picks the backend of the planted-bug cases (default cpu).
Standard library only (runs on CI's python3 without torch).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "minify")

# name, graph, inputs, PTC_INJECT, extra ptminify args, max nodes in the result.
# Stages: prims (the decomposition of a torch op), lower (the loop IR of a
# prim), codegen (the kernel computing a prim), runtime (when it runs).
RESNET = ("resnet18.ptir", None)
BERT = ("bert.ptir", "bert.inputs.bin")
BERT_PRIMS = ("bert_prims.ptir", "bert.inputs.bin")  # stage 2: after decomposition
HANG = ["--timeout", "1"]
ACCURACY = ["--check", "accuracy"]
CASES = [
    ("resnet18-prims-batchnorm-crash", RESNET, "prims:batch_norm:crash", [], 5),
    ("resnet18-prims-add-hang", RESNET, "prims:add:hang", HANG, 5),
    ("resnet18-lower-le-wrong", RESNET, "lower:prims.le:wrong", ACCURACY, 5),
    ("resnet18-codegen-add-error", RESNET, "codegen:prims.add:error", [], 5),
    ("resnet18-codegen-varmean-crash", RESNET, "codegen:prims.var_mean:crash", [], 5),
    ("resnet18-runtime-conv-wrong", RESNET, "runtime:convolution:wrong", ACCURACY, 5),
    ("resnet18-runtime-maxpool-hang", RESNET, "runtime:max_pool2d_with_indices:hang", HANG, 5),
    ("bert-prims-gelu-error", BERT, "prims:gelu:error", [], 5),
    ("bert-prims-layernorm-wrong", BERT, "prims:layer_norm:wrong", [], 5),
    ("bert-lower-rsqrt-crash", BERT, "lower:prims.rsqrt:crash", [], 5),
    ("bert-lower-erf-hang", BERT, "lower:prims.erf:hang", HANG, 5),
    ("bert-codegen-tanh-wrong", BERT, "codegen:prims.tanh:wrong", [], 5),
    ("bert-runtime-sdpa-crash", BERT, "runtime:scaled_dot_product_attention:crash", [], 5),
    ("bert-runtime-gather-error", BERT, "runtime:prims.gather:error",
     ["--check", "error:InjectedError: injected error in runtime of prims.gather"], 5),
    ("bert-runtime-sdpa-wrong-3rd", BERT, "runtime:scaled_dot_product_attention:wrong@3", [],
     5),
    ("bert_prims-lower-erf-wrong", BERT_PRIMS, "lower:prims.erf:wrong", [], 5),
    ("bert_prims-codegen-varmean-error", BERT_PRIMS, "codegen:prims.var_mean:error", [], 5),
]

BACKEND = os.environ.get("PTMINIFY_BACKEND", "cpu")


def run(cmd, env_extra, timeout=900):
    env = dict(os.environ)
    env.pop("PTC_INJECT", None)
    env.update(env_extra)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return r, time.time() - t0


def signature_line(text):
    for line in text.splitlines():
        if line.startswith("ptminify: signature: "):
            return line[len("ptminify: signature: "):]
    return None


def minimise_case(exe, case, jobs, outroot):
    name, (graph, inputs), inject, extra, max_nodes = case
    out = os.path.join(outroot, name)
    cmd = [exe, "--backend", BACKEND, "--jobs", str(jobs), "--max-tests", "150", "-q", "-o", out,
           os.path.join(DATA, graph)] + extra
    if inputs:
        cmd += ["--inputs", os.path.join(DATA, inputs)]
    r, wall = run(cmd, {"PTC_INJECT": inject})
    row = {"case": name, "inject": inject, "stage": inject.split(":")[0],
           "kind": inject.split(":")[2].split("@")[0], "wall_s": round(wall, 2), "ok": False}
    if r.returncode != 0:
        row["error"] = "exit %d: %s" % (r.returncode, r.stderr.strip()[-500:])
        return row
    summary = json.load(open(os.path.join(out, "summary.json")))
    row.update(nodes_before=summary["nodes_before"], nodes_after=summary["nodes_after"],
               tests=summary["tests"], signature=summary["signature"])
    # The result reproduces from its folder alone.
    rr, _ = run([exe, "--reproduce"] + extra + [out], {})
    again = signature_line(rr.stdout)
    problems = []
    if summary["nodes_after"] > max_nodes:
        problems.append("%d nodes left, at most %d expected" % (summary["nodes_after"],
                                                                 max_nodes))
    if rr.returncode != 1 or again != summary["signature"]:
        problems.append("does not reproduce from %s: %s%s" % (out, again, rr.stderr.strip()))
    if not summary["reduced"]:
        problems.append("not reduced")
    row["ok"] = not problems
    if problems:
        row["error"] = "; ".join(problems)
    return row


def disappearing_case(exe, jobs, outroot):
    """A failure that needs every node: an error at the N-th op run, N the
    node count of the BERT graph, so that any smaller graph runs clean. The
    reference backend runs one op per node (the CPU backend's kernels would
    count differently)."""
    graph = os.path.join(DATA, "bert.ptir")
    inject = "runtime:*:error@%d" % open(graph).read().count("\n  %")
    out = os.path.join(outroot, "bert-needs-every-node")
    cmd = [exe, "--backend", "reference", "--jobs", str(jobs), "--max-tests", "400", "-q", "-o",
           out, graph, "--inputs", os.path.join(DATA, "bert.inputs.bin")]
    r, wall = run(cmd, {"PTC_INJECT": inject})
    row = {"case": "bert-needs-every-node", "inject": inject, "stage": "runtime",
           "kind": "error", "wall_s": round(wall, 2), "ok": False}
    problems = []
    if r.returncode != 0:
        problems.append("exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
    else:
        summary = json.load(open(os.path.join(out, "summary.json")))
        row.update(nodes_before=summary["nodes_before"], nodes_after=summary["nodes_after"],
                   tests=summary["tests"], signature=summary["signature"])
        if summary["reduced"] or summary["nodes_after"] != summary["nodes_before"]:
            problems.append("the graph was changed")
        if "disappears when the graph is shrunk" not in r.stdout:
            problems.append("ptminify did not say so: %s" % r.stdout)
    row["ok"] = not problems
    if problems:
        row["error"] = "; ".join(problems)
    return row


def not_failing_case(exe, outroot):
    cmd = [exe, "--backend", BACKEND, "-q", "-o", os.path.join(outroot, "nofail"),
           os.path.join(DATA, "bert.ptir"), "--inputs", os.path.join(DATA, "bert.inputs.bin")]
    r, wall = run(cmd, {})
    ok = r.returncode == 2 and "does not fail" in r.stderr and r.stderr.count("\n") == 1
    row = {"case": "bert-does-not-fail", "inject": "", "stage": "-", "kind": "none",
           "wall_s": round(wall, 2), "ok": ok, "tests": 0}
    if not ok:
        row["error"] = "exit %d: %s" % (r.returncode, r.stderr)
    return row


def table(rows):
    lines = ["| case | stage | kind | nodes before -> after | tests | wall time |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        nodes = "%s -> %s" % (r.get("nodes_before", "?"), r.get("nodes_after", "?"))
        lines.append("| %s | %s | %s | %s | %s | %.1f s |%s" % (
            r["case"], r["stage"], r["kind"], nodes, r.get("tests", "?"), r["wall_s"],
            "" if r["ok"] else "  FAILED: " + r.get("error", "")))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptminify", default=os.path.join(
        os.environ.get("PTC_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "tools",
        "minifier", "ptminify"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only")
    ap.add_argument("--json")
    ap.add_argument("--keep")
    a = ap.parse_args()
    outroot = a.keep or tempfile.mkdtemp(prefix="ptminify_corpus_")
    os.makedirs(outroot, exist_ok=True)
    rows = []
    t0 = time.time()
    try:
        for case in CASES:
            if a.only and a.only not in case[0]:
                continue
            rows.append(minimise_case(a.ptminify, case, a.jobs, outroot))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
        if not a.only or a.only in "bert-needs-every-node":
            rows.append(disappearing_case(a.ptminify, a.jobs, outroot))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
        if not a.only or a.only in "bert-does-not-fail":
            rows.append(not_failing_case(a.ptminify, outroot))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(outroot, ignore_errors=True)
    print()
    print("ptminify corpus, backend %s, --jobs %d, total %.1f s" % (BACKEND, a.jobs,
                                                                   time.time() - t0))
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"backend": BACKEND, "jobs": a.jobs, "cases": rows}, f, indent=1)
    failed = [r["case"] for r in rows if not r["ok"]]
    if failed:
        print("FAILED: %s" % ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
