"""A run directory has one writer: a second run is refused in one line, a lock left by a killed process is taken over.

Split from the bad-input suite (issue #29); run: pytest tests/test_run_lock.py
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from persalign.runner.lock import RunLockedError, locked
from persalign.runner.run import run
from tests.bad_input_helpers import QUIET, cli_error
from tests.test_runner import TINY, metrics_without_timing, tiny_config


def test_a_second_run_on_a_locked_directory_is_refused_in_one_line(tmp_path, capsys, cache_dir):
    target = tmp_path / "run"
    with locked(target):
        line = cli_error(capsys, ["run", "demo-baselines", "-o", str(target)] + TINY)
    assert line.startswith(f"persalign: error: {target} is in use by pid {os.getpid()} on host ")
    with pytest.raises(RunLockedError):
        with locked(target):
            with locked(target):
                pass


def test_two_processes_one_directory_one_refused_the_other_exact(tmp_path, cache_dir):
    """A real second process runs; the in-process run on the same folder is refused; its results are exact."""
    target = tmp_path / "shared"
    child = subprocess.Popen([sys.executable, "-m", "persalign.cli", "run", "demo-baselines", "-o", str(target)] + TINY
                             + ["seeds=[0]"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env={**os.environ, "PERSALIGN_CACHE": str(cache_dir)})
    deadline = time.time() + 120
    while time.time() < deadline and not ((target / ".lock").exists() and (target / ".lock").read_text()):
        time.sleep(0.05)
    with pytest.raises(RunLockedError, match=f"in use by pid {child.pid}"):
        run(tiny_config("seeds=[0]"), target, **QUIET)
    assert child.wait(timeout=300) == 0, child.stderr.read()
    reference = run(tiny_config("seeds=[0]"), tmp_path / "alone", **QUIET)
    from persalign.runner.store import RunStore

    assert metrics_without_timing(RunStore(target)) == metrics_without_timing(reference)


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_message(tmp_path, cache_dir):
    target = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from persalign.runner.lock import locked\n"
                               f"with locked({str(target)!r}):\n    print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    messages = []
    run(tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]"), target, log=messages.append)
    assert any(f"taking over the lock of {target} left by pid {holder.pid}" in m for m in messages)
