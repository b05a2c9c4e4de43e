"""An exclusive lock on a run directory: one writer at a time.

Two `persalign run ... -o DIR` started a second apart used to both write
every row; now the second is refused in one line naming the holder. The lock
is an OS file lock (`fcntl.flock`) on `RUN_DIR/.lock`, so it is released
when its process dies however it dies; the file also records the holder's
pid, host and start time, so a lock left by a dead process is recognised and
taken over with a message.

    persalign run demo -o runs/demo    # a second one on runs/demo: "... is in use by pid N on HOST"
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from persalign.core.errors import PersalignError


class RunLockedError(PersalignError):
    """Another live process holds the run directory."""


def _holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


@contextmanager
def locked(root: str | Path, log=print):
    """Hold RUN_DIR/.lock for the duration of the block (refuse if another live process holds it)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise PersalignError(f"{root}: the run directory is a file; choose another output folder (-o)")
    root.mkdir(parents=True, exist_ok=True)
    path = root / ".lock"
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(path)
        handle.close()
        raise RunLockedError(f"{root} is in use by pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
                             f"(since {holder.get('since', '?')}); wait for it to finish or use another -o") from None
    previous = _holder(path)
    if previous.get("pid"):
        log(f"taking over the lock of {root} left by pid {previous['pid']} on {previous.get('host', '?')} "
            f"(that process is gone; its finished batches are kept)")
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
    handle.flush()
    try:
        yield
    finally:
        handle.seek(0)
        handle.truncate()  # an empty file: nobody holds it (a clean exit leaves no stale holder)
        handle.flush()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
