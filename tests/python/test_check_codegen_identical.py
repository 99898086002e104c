"""scripts/check_codegen_identical.sh end to end, so the developer tool keeps
working although CI has no second build to compare: this build against a
copy of its own ptc-run is identical, and against a ptc-run whose output
differs by one line the script says so and fails."""
import os
import shutil
import subprocess

SRC = os.environ.get("PTC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PTC_BUILD_DIR", os.path.join(SRC, "build"))
SCRIPT = os.path.join(SRC, "scripts", "check_codegen_identical.sh")
PTC_RUN = os.path.join(BUILD, "tools", "run", "ptc-run")


def fake_build(root, body):
    """A build folder whose tools/run/ptc-run is `body` (a file to copy, or a
    shell script's text)."""
    run_dir = os.path.join(root, "tools", "run")
    os.makedirs(run_dir)
    path = os.path.join(run_dir, "ptc-run")
    if os.path.exists(body):
        shutil.copy(body, path)
    else:
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o755)
    return root


def check(tmp_path, new_build, *flags):
    env = dict(os.environ, PTC_CHECK_DIR=str(tmp_path / "dumps"))
    return subprocess.run(["bash", SCRIPT, "--quick", "--only", "^examples/mlp", "--jobs", "2",
                           *flags, BUILD, new_build], env=env, capture_output=True, text=True,
                          timeout=600)


def test_a_copy_of_the_build_is_identical(tmp_path):
    r = check(tmp_path, fake_build(str(tmp_path / "copy"), PTC_RUN))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outputs identical" in r.stdout
    # one file, llvm and sm_90 for its first graph
    assert open(tmp_path / "dumps" / "jobs.txt").read().count("\n") == 2


def test_a_changed_output_is_reported(tmp_path):
    changed = f'#!/bin/sh\n"{PTC_RUN}" "$@"\necho "; one more line"\n'
    r = check(tmp_path, fake_build(str(tmp_path / "changed"), changed))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 of 2 outputs differ" in r.stdout
    assert "> ; one more line" in r.stdout


def test_a_busy_dump_folder_is_refused(tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    with open(dumps / "lock", "w") as lock:
        import fcntl
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = check(tmp_path, fake_build(str(tmp_path / "copy"), PTC_RUN))
    assert r.returncode == 2 and "in use by another run" in r.stderr
