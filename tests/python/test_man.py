"""The man pages render without warnings and document what exists: every log
component of logs/logs.h and every PTC_* environment variable the C sources
read with getenv() appear in man/ptc.7."""
import glob
import os
import re
import shutil
import subprocess

import pytest

SRC = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
MAN = os.path.join(SRC, "man")
PAGES = sorted(glob.glob(os.path.join(MAN, "*.[1-9]")))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def rendered(page):
    """The page as man shows it (formatting removed)."""
    r = subprocess.run(["groff", "-man", "-Tutf8", "-P", "-cbou", page], capture_output=True,
                       text=True, check=True)
    return r.stdout


@pytest.mark.skipif(not shutil.which("groff"), reason="groff is not installed")
@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_renders_without_warnings(page):
    # -ww: all warnings; -z: no output. Anything on stderr is a warning.
    r = subprocess.run(["groff", "-man", "-ww", "-z", "-Tutf8", page], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.skipif(not shutil.which("man"), reason="man is not installed")
def test_man_l_renders_ptc7():
    r = subprocess.run(["man", "-l", os.path.join(MAN, "ptc.7")], capture_output=True,
                       text=True, env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "100"})
    assert r.returncode == 0, r.stderr
    assert "PTC_LOGS" in r.stdout and "TRACE DIRECTORY" in r.stdout


def log_components():
    text = read(os.path.join(SRC, "logs", "logs.h"))
    block = text[text.index("#define PTC_LOG_COMPONENTS(X)"):text.index("typedef enum")]
    names = re.findall(r'X\(\w+, "(\w+)"', block)
    assert len(names) >= 10
    return names


@pytest.mark.skipif(not shutil.which("groff"), reason="groff is not installed")
def test_every_log_component_documented():
    text = rendered(os.path.join(MAN, "ptc.7"))
    section = text[text.index("\nLOG COMPONENTS\n"):text.index("\nTHE .PTIR FORMAT\n")]
    documented = re.findall(r"^ {7}(\w+)\s", section, re.M)
    assert documented == log_components()


def environment_variables():
    """PTC_* names passed to getenv() in the compiler, logs, tools and python dirs."""
    found = set()
    for sub in ("compiler", "logs", "tools", "python"):
        for path in glob.glob(os.path.join(SRC, sub, "**", "*.[ch]"), recursive=True):
            found |= set(re.findall(r'getenv\(\s*"(PTC_[A-Z0-9_]+)"', read(path)))
    return sorted(found)


def test_every_environment_variable_documented():
    text = read(os.path.join(MAN, "ptc.7"))
    env = text[text.index(".SH ENVIRONMENT"):]
    env = env[:env.index("\n.SH ", 1)]
    names = environment_variables()
    assert "PTC_LOGS" in names and "PTC_TRACE_DIR" in names
    missing = [n for n in names if ".B " + n not in env]
    assert not missing, "undocumented in man/ptc.7 ENVIRONMENT: %s" % missing
