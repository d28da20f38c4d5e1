"""Metric writers: `workdir/metrics.jsonl` (one JSON object per line, always with "step") and TensorBoard.

Only process 0 writes; other processes get a writer that does nothing. TensorBoard event files are written with
tensorboardX (no TensorFlow needed).

Each step appears once in `metrics.jsonl`: a resumed run first drops the records past the step it resumes from
(they are logged again), replacing the file atomically. On a local disk records are then appended and flushed one
by one. Object stores have no append: the records are kept in memory and the whole object is rewritten at most
every `flush_secs` seconds and at every checkpoint (`flush()`), so a run killed without warning loses at most the
records since the last flush — all of them after its last checkpoint, which the resumed run logs again. TensorBoard
events for a `gs://` workdir are written to a local staging folder and uploaded whole at the same moments (files
roll over at `tb_chunk_bytes`, so one upload stays small on a long run). `workdir/log.txt` (`train/runlog.py`), when
given, is flushed (uploaded) with the metrics.

A failing disk or store (full, read-only, gone) surfaces as one `storage.StorageError` naming the file, from the
TensorBoard event files too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import jax
import numpy as np

from vit_jax_struct import storage


def _records(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:  # A line cut short by a crash mid-write (local append): dropped.
                continue
    return out


class MetricWriter:
    """Writes scalars to `metrics.jsonl` and TensorBoard under `workdir` (local or `gs://`).

    `write(step, {"train/loss": 0.3, ...})` writes `{"step": step, "train/loss": 0.3, ...}`; values are
    converted to Python floats (bitwise: a float32 is widened to float64 exactly).

    Args:
      workdir: the run folder.
      tensorboard: also write TensorBoard event files under `workdir/tensorboard`.
      resume_step: records with a step above this are dropped first (the resumed run writes them again);
        None keeps the file as it is.
      flush_secs: object stores only: the longest time between two uploads of the records.
      tb_chunk_bytes: object stores only: start a new event file past this size.
      runlog: a `train/runlog.RunLog` flushed (uploaded) together with the metrics.

    Raises:
      storage.StorageError: the file cannot be read or written (names it).
    """

    def __init__(self, workdir: str, tensorboard: bool = True, resume_step: int | None = None,
                 flush_secs: float = 30.0, tb_chunk_bytes: int = 4 << 20, runlog=None):
        self.active = jax.process_index() == 0
        self.workdir = str(workdir)
        self.path = storage.join(workdir, "metrics.jsonl")
        self.remote = storage.is_url(workdir)
        self.flush_secs, self.tb_chunk_bytes = float(flush_secs), int(tb_chunk_bytes)
        self.tb = self.file = None
        self.runlog = runlog
        self._lines: list[str] = []
        self._dirty, self._last_flush, self._failed = False, time.time(), False
        if not self.active:
            return
        storage.makedirs(workdir)
        if storage.exists(self.path):
            text = storage.read_text(self.path)
            records = _records(text)
            kept = records if resume_step is None else [r for r in records if r.get("step", 0) <= resume_step]
            self._lines = [json.dumps(r) for r in kept]
            if len(kept) != len(records) or (text and not text.endswith("\n")):
                storage.write_text(self.path, "".join(line + "\n" for line in self._lines))
        if not self.remote:
            self.file = open(self.path, "a")  # noqa: SIM115 -- kept open for the run, closed in close()
            self._lines = []  # On disk already; appended from here.
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb_dir = storage.join(workdir, "tensorboard")
            self._staging = tempfile.mkdtemp(prefix="tb-") if self.remote else None
            self._chunk = 0
            self.tb = SummaryWriter(self._staging or self._tb_dir)

    def write(self, step: int, scalars: dict) -> None:
        if not self.active:
            return
        values = {k: float(np.asarray(v)) for k, v in scalars.items()}
        line = json.dumps({"step": int(step), **values})
        if self.tb is not None:
            for k, v in values.items():
                self.tb.add_scalar(k, v, int(step))
        if self.file is not None:
            storage.append_line(self.file, self.path, line)
            self._flush_tensorboard()
        else:
            self._lines.append(line)
            self._dirty = True
            if time.time() - self._last_flush >= self.flush_secs:
                self.flush()

    def flush(self) -> None:
        """Makes every record written so far durable (object stores: one upload of each changed file)."""
        if not self.active:
            return
        if self.file is not None:
            try:
                self.file.flush()
                os.fsync(self.file.fileno())
            except OSError as e:
                raise storage.StorageError(f"cannot write {self.path}: {e}") from e
            self._flush_tensorboard()
            if self.runlog is not None:
                self.runlog.flush()
            return
        if self._failed:
            return
        try:
            if self.tb is not None:
                self._flush_tensorboard()
                self._upload_tensorboard()
            if self._dirty:
                storage.write_text(self.path, "".join(line + "\n" for line in self._lines))
                self._dirty = False
            if self.runlog is not None:
                self.runlog.flush()
        except storage.StorageError:
            self._failed = True  # The store is gone: report once, do not retry on close.
            raise
        self._last_flush = time.time()

    def _flush_tensorboard(self) -> None:
        if self.tb is None:
            return
        where = self._staging or self._tb_dir
        try:
            self.tb.flush()
        except OSError as e:  # tensorboardX raises the disk's error as is (ENOSPC, EROFS)
            raise storage.StorageError(f"cannot write the TensorBoard event file in {where}: {e}") from e

    def records(self) -> list[dict]:
        """Every record written so far (this run's and the kept ones of earlier runs), in file order."""
        if not self.active:
            return []
        if self.file is not None:
            return _records(storage.read_text(self.path))
        return _records("\n".join(self._lines))

    def _upload_tensorboard(self, final: bool = False) -> None:
        """Uploads the staged event file(s) whole; one past `tb_chunk_bytes` is closed first and replaced by a new
        file (TensorBoard reads every file of the folder), so later uploads stay small."""
        roll = not final and any(os.path.getsize(os.path.join(self._staging, n)) > self.tb_chunk_bytes
                                 for n in os.listdir(self._staging))
        if roll:
            self.tb.close()
        for name in sorted(os.listdir(self._staging)):
            local = os.path.join(self._staging, name)
            with open(local, "rb") as f:
                storage.write_bytes(storage.join(self._tb_dir, name), f.read())
            if roll:
                os.remove(local)
        if roll:  # A distinct name: event files are named by the second they were opened in.
            from tensorboardX import SummaryWriter

            self._chunk += 1
            self.tb = SummaryWriter(self._staging, filename_suffix=f".{self._chunk}")

    def close(self, upload: bool = True) -> None:
        """Flushes everything (uploads on an object store) and closes the files.

        `upload=False` (stopping because the store failed): closes without another upload, which would only wait
        out the store's retries again; the records since the last flush are logged again by the resumed run."""
        if not self.active:
            return
        if not upload:
            self._failed = True
        try:
            if self.remote and self._failed:
                if self.tb is not None:
                    self.tb.close()
                    shutil.rmtree(self._staging, ignore_errors=True)
            elif self.remote:
                if self.tb is not None:
                    self.tb.close()
                    self._upload_tensorboard(final=True)
                    shutil.rmtree(self._staging, ignore_errors=True)
                    self.tb = None
                self.flush()
            else:
                if self.tb is not None:
                    try:
                        self.tb.close()
                    except OSError as e:
                        raise storage.StorageError(f"cannot write the TensorBoard event file in {self._tb_dir}: "
                                                   f"{e}") from e
                if self.file is not None:
                    self.file.close()
        finally:
            self.file = self.tb = None
            self.active = False


def read_metrics(workdir: str) -> list[dict]:
    """All records of `workdir/metrics.jsonl` (local or `gs://`), in file order."""
    return _records(storage.read_text(storage.join(workdir, "metrics.jsonl")))


COMPARED = ("train/loss", "train/grad_norm", "eval/accuracy", "eval/loss")


def compare_runs(a: str, b: str, keys=COMPARED) -> dict:
    """Are two runs the same run? Compares `keys` at every logged step of workdirs `a` and `b` (local or `gs://`),
    exactly (bit for bit, as JSON floats). Returns `{"values": n compared, "mismatched": [(step, key, a, b)],
    "only_in_a": [...], "only_in_b": [...]}`; `same` is True when there is at least one value and no difference.
    Timing keys (`time/…`, images/s) are not compared: they differ between any two runs."""
    def values(workdir):
        return {(r["step"], k): r[k] for r in read_metrics(workdir) for k in keys if k in r}

    va, vb = values(a), values(b)
    out = {"values": len(va.keys() & vb.keys()),
           "mismatched": [(s, k, va[(s, k)], vb[(s, k)]) for (s, k) in sorted(va.keys() & vb.keys())
                          if va[(s, k)] != vb[(s, k)]],
           "only_in_a": sorted(va.keys() - vb.keys()), "only_in_b": sorted(vb.keys() - va.keys())}
    out["same"] = bool(out["values"]) and not (out["mismatched"] or out["only_in_a"] or out["only_in_b"])
    return out


def main(argv=None) -> int:
    """`python -m vit_jax_struct.train.metrics --compare A B`: exit 0 when runs A and B logged the same losses, grad
    norms and eval metrics at every step (bit for bit), 1 otherwise, with one summary line."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), required=True, help="two workdirs")
    args = ap.parse_args(argv)
    for w in args.compare:
        if not storage.exists(storage.join(w, "metrics.jsonl")):
            print(f"error: {w} has no metrics.jsonl (not a run's workdir)", file=sys.stderr)
            return 2
    r = compare_runs(*args.compare)
    print(f"{'same' if r['same'] else 'different'}: {r['values']} values compared ({', '.join(COMPARED)}), "
          f"{len(r['mismatched'])} mismatched, {len(r['only_in_a'])} only in A, {len(r['only_in_b'])} only in B"
          + (f"; first mismatch {r['mismatched'][0]}" if r["mismatched"] else ""))
    return 0 if r["same"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
