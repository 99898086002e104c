"""ptc as a user installs it: a wheel built with pip from a clean clone of
this source tree (its committed state: `git clone`, nothing built or
ignored carried over), installed into a fresh virtual environment, used from
a folder outside the clone; and `cmake --install` of the build under test
into a prefix.

What must work there: `import ptc` compiles a model; the four tools run from
PATH; `man -w` finds their pages; torch.compile(..., backend="ptc") (found
through the wheel's torch_dynamo_backends entry point) gives eager's results
with ptc's graphs; the repro.py that ptminify writes imports the installed ptc.
"""
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

SRC = Path(os.environ.get("PTC_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("PTC_BUILD_DIR", SRC / "build"))
TOOLS = ("ptc-run", "ptview", "ptminify", "ptexplain")

pytest.importorskip("scikit_build_core", reason="scikit-build-core is not installed "
                    "(requirements.txt); the wheel cannot be built")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, "%s\n--- stdout\n%s\n--- stderr\n%s" % (cmd, r.stdout[-4000:],
                                                                      r.stderr[-4000:])
    return r


def clean_clone(tmp):
    """A fresh clone of the source tree's committed state, as a user gets it
    (a source tree that is not a git checkout, an unpacked sdist, is built
    as it is)."""
    if not (SRC / ".git").exists() or not shutil.which("git"):
        return SRC
    run(["git", "clone", "--quiet", "--no-hardlinks", str(SRC), str(tmp / "clone")])
    return tmp / "clone"


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory):
    """A virtual environment (seeing this python's torch) with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("PTC_JOBS", "2"))
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "-w", str(tmp / "dist"), str(clean_clone(tmp))], env=env)
    wheels = list((tmp / "dist").glob("ptc-*.whl"))
    assert len(wheels) == 1, wheels
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(tmp / "venv")
    vpy = tmp / "venv" / "bin" / "python"
    run([str(vpy), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheels[0])])
    return tmp


def user_env(bindir):
    """The environment of a user whose PATH starts at bindir, outside the clone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PTC_BUILD_DIR")}
    env["PATH"] = "%s:%s" % (bindir, env.get("PATH", "/usr/bin:/bin"))
    env.pop("MANPATH", None)
    return env


SMALL_MODEL = textwrap.dedent("""
    import torch, ptc, torchvision
    print("ptc from", ptc.__file__)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert torch.allclose(ptc.compile(m)(x), m(x), atol=1e-5)
    print("compiled ok")
""")

DYNAMO = textwrap.dedent("""
    import torch, torchvision
    assert "ptc" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
    def f(x, y):
        return torch.sin(x) * y + 1
    x, y = torch.randn(16), torch.randn(16)
    assert torch.allclose(torch.compile(f, backend="ptc")(x, y), f(x, y), atol=1e-6)
    m = torchvision.models.resnet18(num_classes=10).eval()
    img = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want, got = m(img), torch.compile(m, backend="ptc")(img)
    assert (want - got).abs().max().item() < 1e-3, (want - got).abs().max().item()
    print("dynamo backend ok")
""")


def test_wheel_python_package(env_dir, tmp_path):
    bindir = env_dir / "venv" / "bin"
    r = run([str(bindir / "python"), "-c", SMALL_MODEL], cwd=tmp_path, env=user_env(bindir))
    assert "compiled ok" in r.stdout
    assert str(env_dir / "venv") in r.stdout, r.stdout  # the installed package, not the build


def test_wheel_tools_and_man_pages(env_dir, tmp_path):
    bindir = env_dir / "venv" / "bin"
    env = user_env(bindir)
    for tool in TOOLS:
        assert shutil.which(tool, path=env["PATH"]) == str(bindir / tool)
        r = run([tool, "--help"], cwd=tmp_path, env=env)
        assert tool in (r.stdout + r.stderr)
    if shutil.which("man"):
        for page in TOOLS + ("ptc",):
            r = run(["man", "-w", page], cwd=tmp_path, env=env)
            assert r.stdout.startswith(str(env_dir / "venv" / "share" / "man")), r.stdout
    # ptexplain embeds python: it must find the installed ptc, not a build tree.
    script = tmp_path / "explained.py"
    script.write_text("import ptc, torch\nprint('ptc from', ptc.__file__)\n"
                      "f = ptc.compile(lambda x: x.sin() + 1)\nf(torch.randn(4))\n")
    r = run(["ptexplain", str(script)], cwd=tmp_path, env=env)
    assert "ptc from %s" % (env_dir / "venv") in r.stdout, r.stdout


def test_wheel_torch_compile_backend(env_dir, tmp_path):
    pytest.importorskip("torch._dynamo", reason="torch.compile needs torch 2")
    bindir = env_dir / "venv" / "bin"
    trace = tmp_path / "trace"
    env = dict(user_env(bindir), PTC_LOGS="captured", PTC_TRACE_DIR=str(trace))
    r = run([str(bindir / "python"), "-c", DYNAMO], cwd=tmp_path, env=env)
    assert "dynamo backend ok" in r.stdout
    # Dynamo's two graphs reached ptc's compiler (FX's generated forward, captured by ptc).
    assert r.stderr.count("[ptc:captured] graph 0 of forward (first call)") == 2, r.stderr[-3000:]
    # ...and ran as ptc's kernels: each compile's trace holds its kernel schedule and code,
    # resnet18's with its convolutions as externs
    compiles = [d for d in trace.iterdir() if (d / "kernels.txt").is_file()]
    assert len(compiles) == 2, sorted(p.name for p in trace.rglob("*"))
    assert all(list(d.glob("kernel_*.ll")) for d in compiles), compiles
    assert any("convolution" in (d / "kernels.txt").read_text() for d in compiles)


def test_wheel_minifier_repro_imports_ptc(env_dir, tmp_path):
    bindir = env_dir / "venv" / "bin"
    env = user_env(bindir)
    graph = tmp_path / "chain.ptir"
    graph.write_text(textwrap.dedent("""\
        # ptc ir v1
        graph forward(%x: f32[4,8] cpu) {
          %0 = exp(%x) : f32[4,8]
          %1 = tanh(%0) : f32[4,8]
          %2 = neg(%1) : f32[4,8]
          return (%2)
        }
        """))
    out = tmp_path / "out"
    run(["ptminify", "--backend", "harness", "-o", str(out), str(graph)], cwd=tmp_path,
        env=dict(env, PTC_INJECT="runtime:tanh:error"))
    r = subprocess.run([str(bindir / "python"), str(out / "repro.py")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert "cannot import ptc" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert r.returncode in (0, 1), r.stdout + r.stderr


def test_cmake_install(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)])
    for tool in TOOLS:
        assert (prefix / "bin" / tool).is_file(), tool
    assert (prefix / "share" / "man" / "man1" / "ptexplain.1").is_file()
    assert (prefix / "share" / "man" / "man7" / "ptc.7").is_file()
    assert (prefix / "lib" / "libptc.a").is_file()
    assert (prefix / "include" / "ptc" / "ir" / "ir.h").is_file()
    assert (prefix / "include" / "ptc" / "ir" / "ops.def").is_file()
    assert (prefix / "include" / "ptc" / "ir" / "pointwise.def").is_file()  # ops.def includes it
    assert (prefix / "include" / "ptc" / "pipeline" / "pipeline.h").is_file()
    site = list(prefix.glob("lib/python3*/site-packages/ptc/_C.abi3.so"))
    assert len(site) == 1, site
    # The installed ptexplain finds the installed package beside its bin/.
    script = tmp_path / "where.py"
    script.write_text("import ptc\nprint('ptc from', ptc.__file__)\n")
    r = run([str(prefix / "bin" / "ptexplain"), str(script)], cwd=tmp_path,
            env=user_env(prefix / "bin"))
    assert "ptc from %s" % prefix in r.stdout, r.stdout
    # A C program builds against the installed headers and library.
    prog = tmp_path / "use.c"
    prog.write_text('#include "ir/ir.h"\n#include <stdio.h>\n'
                    'int main(void) { printf("%s\\n", PTC_VERSION); return 0; }\n')
    run(["cc", "-I%s" % (prefix / "include" / "ptc"), str(prog), "-o", str(tmp_path / "use")])
    assert run([str(tmp_path / "use")]).stdout.strip()
