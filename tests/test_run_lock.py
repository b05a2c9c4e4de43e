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


@pytest.mark.slow
def test_two_processes_one_directory_one_refused_the_other_exact(tmp_path, cache_dir):
    """A real second process runs; the in-process run on the same folder is refused; its results are exact."""
    target = tmp_path / "shared"
    child = subprocess.Popen([sys.executable, "-m", "persalign.cli.commands", "run", "demo-baselines", "-o", str(target)] + TINY
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


SLOW_AFTER_FIRST_BATCH = """
import sys, time
from persalign import cli
from persalign.runner.store import RunStore
real_append = RunStore.append
def append_then_wait(self, *args, **kwargs):
    stored = real_append(self, *args, **kwargs)
    print('stored a batch', flush=True)
    time.sleep(120)
    return stored
RunStore.append = append_then_wait
sys.exit(cli.main(sys.argv[1:]))
"""


def test_sigterm_stops_a_run_in_one_line_keeping_its_batches_and_a_resume_is_exact(tmp_path, cache_dir):
    """What a scheduler, `kill` or `timeout` sends: before, SIGTERM ended the process with no message and
    exit -15 (and left nothing said about resuming); now it unwinds like Ctrl-C, exit 143."""
    target = tmp_path / "run"
    argv = ["run", "demo-baselines", "-o", str(target), "seeds=[0]", "decoders=[{name: zero_shot}]"] + TINY[:-1]
    log = tmp_path / "stderr.txt"  # a file, not a pipe: progress bars can never fill a buffer and stall the child
    with log.open("w") as stderr:
        child = subprocess.Popen([sys.executable, "-c", SLOW_AFTER_FIRST_BATCH] + argv, text=True,
                                 stdout=subprocess.PIPE, stderr=stderr,
                                 env={**os.environ, "PERSALIGN_CACHE": str(cache_dir)})
        while child.stdout.readline().strip() != "stored a batch":
            assert child.poll() is None, log.read_text()
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=60)
    err = log.read_text()
    assert child.returncode == 143, err
    assert err.splitlines()[-1] == ("persalign: terminated (SIGTERM); completed batches are saved, re-run the "
                                    "same command to resume"), err
    assert [p.stat().st_size > 0 for p in target.glob("cells/*/*/*/rows.jsonl")] == [True]
    assert not list(target.glob("cells/*/*/*/metrics.json"))
    resumed = run(tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]"), target, **QUIET)
    alone = run(tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]"), tmp_path / "alone", **QUIET)
    assert metrics_without_timing(resumed) == metrics_without_timing(alone)
