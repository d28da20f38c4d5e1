"""One writer per workdir: `WorkdirLock(workdir)`, held by process 0 of a run while it trains.

Two runs on one workdir would interleave metrics, replace each other's config and checkpoints. The second run
therefore fails at once with `WorkdirBusyError` naming the holder (host, PID, since when).

- Local disk: `workdir/lock`, an exclusive `fcntl.flock` on it. The kernel drops the lock when the holder dies
  (even by `kill -9`), so a stale lock never blocks; the file's text names the holder for the message.
- Object store (`gs://…`): the object `workdir/lock`, created only if absent (`ifGenerationMatch=0`) and rewritten
  every `heartbeat_s` seconds by a background thread (with `ifGenerationMatch=<its generation>`, so two writers
  cannot both believe they hold it). A lock whose heartbeat is older than `stale_s` (its holder was killed) is
  taken over, also by a generation-matched write; so is one whose holder ran on this host and has exited. A
  holder that finds its lock taken over (or cannot refresh it)
  sets `lost`; the train loop checks it and stops.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import threading
import time

from absl import logging

from vit_jax_struct import storage


class WorkdirBusyError(RuntimeError):
    """Another run holds the workdir's lock; the message names it."""


def _holder() -> dict:
    now = time.time()
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": now,
            "since_utc": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(timespec="seconds"),
            "heartbeat": now}


def _dead_here(info: dict) -> bool:
    """True if the holder ran on this host and its process is gone (then its lock is stale at once)."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _describe(info: dict) -> str:
    return (f"host {info.get('host', '?')}, PID {info.get('pid', '?')}, since {info.get('since_utc', '?')}")


class WorkdirLock:
    """Exclusive lock on a workdir (local or `gs://`); a context manager (`acquire()` / `release()`).

    Args:
      workdir: the run folder (created if needed).
      stale_s: object stores only: a lock whose heartbeat is older than this is taken over.
      heartbeat_s: object stores only: how often the holder refreshes its lock.

    Raises (from `acquire`):
      WorkdirBusyError: another live run holds the lock (names host, PID and since when).
      storage.StorageError: the lock cannot be written.
    """

    def __init__(self, workdir: str, stale_s: float = 120.0, heartbeat_s: float = 20.0):
        self.workdir = str(workdir)
        self.path = storage.join(workdir, "lock")
        self.stale_s, self.heartbeat_s = float(stale_s), float(heartbeat_s)
        self.lost = None  # a message once an object-store lock was lost
        self._fd = None
        self._stop = threading.Event()
        self._thread = None
        self._generation = None
        self._blob = None

    # -- local -------------------------------------------------------------------------------------------------
    def _acquire_local(self):
        import fcntl

        storage.makedirs(self.workdir)
        p = str(storage.path(self.path))
        try:
            fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides, as for every file of the run
        except OSError as e:  # a read-only workdir (EACCES, EROFS), a full disk
            raise storage.StorageError(f"cannot create the workdir lock {p}: {e.strerror or e} (the workdir must "
                                       "be writable)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
            except ValueError:
                info = {}
            os.close(fd)
            raise WorkdirBusyError(f"workdir {self.workdir} is in use by another run ({_describe(info)}; lock "
                                   f"{p}). Wait for it to finish, stop it, or use another --workdir.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        os.fsync(fd)
        self._fd = fd

    # -- object store ------------------------------------------------------------------------------------------
    def _acquire_gcs(self):
        from google.api_core import exceptions as gexc

        bucket, key = storage.gcs_bucket_and_key(self.path)
        self._blob = storage.gcs_client().bucket(bucket).blob(key)
        info = _holder()
        try:
            self._blob.upload_from_string(json.dumps(info), if_generation_match=0)
        except gexc.PreconditionFailed:
            self._blob.reload()
            try:
                old = json.loads(self._blob.download_as_text(if_generation_match=self._blob.generation))
            except (ValueError, gexc.PreconditionFailed):
                old = {}
            age = time.time() - float(old.get("heartbeat", 0))
            if age < self.stale_s and not _dead_here(old):
                raise WorkdirBusyError(
                    f"workdir {self.workdir} is in use by another run ({_describe(old)}; last heartbeat "
                    f"{age:.0f} s ago; lock {self.path}). Wait for it to finish, stop it, or use another "
                    f"--workdir. A lock left by a killed run is taken over after {self.stale_s:.0f} s.") from None
            logging.warning("workdir lock %s of %s is stale (heartbeat %.0f s ago, or its process on this host "
                            "has exited); taking it over", self.path, _describe(old), age)
            try:
                self._blob.upload_from_string(json.dumps(info), if_generation_match=self._blob.generation)
            except gexc.PreconditionFailed:
                raise WorkdirBusyError(f"workdir {self.workdir}: another run took the stale lock {self.path} "
                                       "at the same time") from None
        except Exception as e:
            if isinstance(e, WorkdirBusyError):
                raise
            raise storage.StorageError(f"cannot write the workdir lock {self.path}: {type(e).__name__}: {e}") from e
        self._generation = self._blob.generation
        self._info, self._refreshed = info, time.time()
        self._thread = threading.Thread(target=self._heartbeat, name="workdir-lock-heartbeat", daemon=True)
        self._thread.start()

    def _heartbeat(self):
        while not self._stop.wait(self.heartbeat_s) and self.refresh():
            pass

    def refresh(self) -> bool:
        """Rewrites an object-store lock's heartbeat (the background thread calls this); False once it is lost."""
        from google.api_core import exceptions as gexc

        self._info["heartbeat"] = time.time()
        try:
            self._blob.upload_from_string(json.dumps(self._info), if_generation_match=self._generation,
                                          timeout=min(self.heartbeat_s, 30.0), retry=None)  # next beat retries
            self._generation = self._blob.generation
            self._refreshed = time.time()
        except gexc.PreconditionFailed:
            self.lost = f"the workdir lock {self.path} was taken over by another run"
        except Exception as e:  # The store is unreachable: keep trying until the lock would look stale.
            if time.time() - self._refreshed > self.stale_s - self.heartbeat_s:
                self.lost = f"cannot refresh the workdir lock {self.path}: {type(e).__name__}: {e}"
        return not self.lost

    # -- API ---------------------------------------------------------------------------------------------------
    def acquire(self) -> WorkdirLock:
        if storage.is_url(self.workdir):
            self._acquire_gcs()
        else:
            self._acquire_local()
        return self

    def check(self) -> None:
        """Raises `WorkdirBusyError` if an object-store lock was lost (taken over, or not refreshable)."""
        if self.lost:
            raise WorkdirBusyError(self.lost + "; stopping so that two runs do not write one workdir")

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            try:
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1.0)  # a beat stuck on an unreachable store is a daemon: not waited for
            self._thread = None
            if not self.lost:
                try:
                    self._blob.delete(if_generation_match=self._generation, timeout=10, retry=None)
                except Exception as e:  # Left behind, it goes stale after stale_s.
                    logging.warning("could not delete the workdir lock %s (%s); it expires after %.0f s",
                                    self.path, e, self.stale_s)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
