"""Metric writers: `workdir/metrics.jsonl` (one JSON object per line, always with "step") and TensorBoard.

Only process 0 writes; other processes get a writer that does nothing. TensorBoard event files are written with
tensorboardX (no TensorFlow needed).
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np


class MetricWriter:
    """Appends scalars to `metrics.jsonl` and TensorBoard under `workdir`.

    `write(step, {"train/loss": 0.3, ...})` writes `{"step": step, "train/loss": 0.3, ...}`; values are
    converted to Python floats (bitwise: a float32 is widened to float64 exactly). Appending keeps the history of
    a resumed run in the same file.
    """

    def __init__(self, workdir: str, tensorboard: bool = True):
        self.active = jax.process_index() == 0
        self.path = os.path.join(workdir, "metrics.jsonl")
        self.tb = None
        if self.active:
            os.makedirs(workdir, exist_ok=True)
            self.file = open(self.path, "a")  # noqa: SIM115 -- kept open for the run, closed in close()
            if tensorboard:
                from tensorboardX import SummaryWriter

                self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, scalars: dict) -> None:
        if not self.active:
            return
        values = {k: float(np.asarray(v)) for k, v in scalars.items()}
        self.file.write(json.dumps({"step": int(step), **values}) + "\n")
        self.file.flush()
        if self.tb is not None:
            for k, v in values.items():
                self.tb.add_scalar(k, v, int(step))
            self.tb.flush()

    def close(self) -> None:
        if self.active:
            self.file.close()
            if self.tb is not None:
                self.tb.close()


def read_metrics(workdir: str) -> list[dict]:
    """All records of `workdir/metrics.jsonl`, in file order."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
