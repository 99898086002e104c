"""Running a test's program in a child process, so that a crash is a test
failure rather than the end of pytest, against the build's ptc
(PTC_BUILD_DIR). Against an ASan build (PTC_BUILD_DIR configured with
-DPTC_SANITIZE=address,...) the child runs with libasan preloaded, and the
parent never imports ptc: it may not load an ASan one."""
import os
import re
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def asan_env():
    """LD_PRELOAD and ASAN_OPTIONS for a child that loads an ASan-built ptc, else {}."""
    cache = os.path.join(os.environ.get("PTC_BUILD_DIR", ""), "CMakeCache.txt")
    try:
        sanitize = re.search(r"^PTC_SANITIZE:\w+=(.*)$", open(cache).read(), re.M)
    except OSError:
        return {}
    if not sanitize or "address" not in sanitize.group(1):
        return {}
    cc = re.search(r"^CMAKE_C_COMPILER:\w+=(.*)$", open(cache).read(), re.M)

    def lib(name):
        return subprocess.run([cc.group(1) if cc else "gcc", "-print-file-name=" + name],
                              capture_output=True, text=True).stdout.strip()

    # libstdc++ too: libasan, loaded before it, finds no __cxa_throw to
    # intercept, and its check fails at torch's first C++ exception
    # ("CHECK failed: ... real___cxa_throw").
    # CPython's own allocations are never freed at exit: leaks are not a test's.
    return {"LD_PRELOAD": lib("libasan.so") + " " + lib("libstdc++.so.6"),
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1"}


def run_child(args, tmp_path, timeout, **extra_env):
    """sys.executable with args in HERE, PTC_STRICT=1 and a cache of its own;
    its stdout, after asserting that it exited with 0."""
    path = [os.path.join(os.environ["PTC_BUILD_DIR"], "python")] if "PTC_BUILD_DIR" in os.environ else []
    path += [HERE, os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PTC_STRICT="1", PTC_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(path), **asan_env(), **extra_env)
    r = subprocess.run([sys.executable] + args, capture_output=True, text=True, env=env,
                       timeout=timeout, cwd=HERE)
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-6000:])
    return r.stdout


def run_code(code, tmp_path, timeout=600, **extra_env):
    return run_child(["-c", textwrap.dedent(code)], tmp_path, timeout, **extra_env)
