"""The committed dtype promotion table (tests/unit/promote_table.inc, used by
test_ir.c) agrees with the installed torch.promote_types."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_promote_table  # noqa: E402


def test_committed_table_matches_torch():
    with open(gen_promote_table.TABLE) as f:
        committed = gen_promote_table.committed_rows(f.read())
    assert len(committed) == 10
    assert committed == gen_promote_table.table_rows()


def test_every_pair_listed():
    with open(gen_promote_table.TABLE) as f:
        rows = gen_promote_table.committed_rows(f.read())
    for a, row in zip(gen_promote_table.NAMES, rows):
        assert row.endswith("/* %s */" % a)
        assert row.count('"') == 20


def test_check_mode_exit_status():
    script = os.path.join(HERE, "gen_promote_table.py")
    r = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
