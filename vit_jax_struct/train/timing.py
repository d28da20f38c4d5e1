"""Where a run's wall time goes: `TimeAccount`, the `time/…` metrics and `goodput`.

Categories (seconds of host wall time, this process, since `train_and_evaluate` was entered):

- `startup`: building the model and data, the workdir lock, writing `config.json` — everything before the first
  train step that is not `restore` or `compile`.
- `restore`: reading the newest checkpoint (or the `init_from` parameters).
- `compile`: the first train-step call of this process (tracing, lowering and compiling it, or loading it from the
  persistent compilation cache). Evaluation programs compile inside `eval` / `fewshot`.
- `data_wait`: the host blocked in `next()` on the train iterator (the input pipeline was behind). The device may
  still be running steps queued before (JAX dispatches asynchronously), so on a device-bound run this stays near 0
  and on an input-bound run it is the time the device idled.
- `checkpoint`: the blocking part of a save (waiting for the queued steps, copying the state to the host and
  starting the background write) and the final wait for background writes.
- `eval`, `fewshot`: evaluation, including waiting for the steps queued before it.
- `profile`: writing a `config.profile` trace.
- `train_step`: the rest of the training loop — dispatching steps and waiting for them at log boundaries.

The loop never waits for a step on its own: results are fetched at log, eval and checkpoint boundaries only, so
there is no per-step device sync. `train_step` is therefore measured as the wall time of a log interval minus the
other categories inside it; summed over the run, the categories add up to the wall time, and
`goodput = train_step / wall` (MaxText's definition: the share of wall time spent in productive train steps).
"""

from __future__ import annotations

import contextlib
import time

CATEGORIES = ("startup", "restore", "compile", "train_step", "data_wait", "checkpoint", "eval", "fewshot", "profile")


class TimeAccount:
    """Accumulates seconds per category (see the module docstring) for the current log interval and in total.

    Usage: `with account.measure("eval"): …`, or `account.add("compile", seconds)`; `interval()` closes a log
    interval (its unattributed time becomes `train_step`) and returns its `time/<category>` seconds.

    Args:
      start: the wall-clock time (`time.time()`) the run started; default now.
    """

    def __init__(self, start: float | None = None):
        self.start = time.time() if start is None else float(start)
        self.total = dict.fromkeys(CATEGORIES, 0.0)
        self._interval = dict.fromkeys(CATEGORIES, 0.0)
        self._interval_start = self.start
        self._in_loop = False

    def add(self, category: str, seconds: float) -> None:
        """Adds `seconds` to `category` (one of `CATEGORIES`).

        Raises:
          KeyError: an unknown category.
        """
        if category not in self.total:
            raise KeyError(f"time category {category!r} is not one of {CATEGORIES}")
        self.total[category] += seconds
        self._interval[category] += seconds

    @contextlib.contextmanager
    def measure(self, category: str):
        """Adds the wall time of the `with` block to `category`."""
        t0 = time.time()
        try:
            yield
        finally:
            self.add(category, time.time() - t0)

    def start_loop(self) -> None:
        """Marks the start of the training loop: the time since `start` not yet attributed is `startup`."""
        now = time.time()
        self.add("startup", max(0.0, now - self.start - sum(self.total.values())))
        self._in_loop = True

    def stop_loop(self) -> None:
        """Marks the end of the training loop (which closes its last interval at its last step): later time is
        counted only where measured (the final eval, the wait for the last checkpoint)."""
        self._in_loop = False

    def interval(self) -> dict[str, float]:
        """Closes the current log interval: `{"time/<category>": seconds}` spent in it (train_step = the interval's
        wall time minus the other categories), then starts the next one."""
        now = time.time()
        if self._in_loop:
            other = sum(v for k, v in self._interval.items() if k != "train_step")
            self.add("train_step", max(0.0, now - self._interval_start - other))
        out = {f"time/{k}": v for k, v in self._interval.items()}
        self._interval = dict.fromkeys(CATEGORIES, 0.0)
        self._interval_start = now
        return out

    def summary(self) -> dict[str, float]:
        """Totals since `start`: `time/<category>` and `time/wall` in seconds, `goodput` = train_step / wall (0..1).

        Call after the last `interval()` (time after it is counted in no category)."""
        wall = max(time.time() - self.start, 1e-9)
        out = {f"time/{k}": v for k, v in self.total.items()}
        out["time/wall"] = wall
        out["goodput"] = self.total["train_step"] / wall
        return out


def format_summary(summary: dict) -> str:
    """One line: `wall 93.1 s: train_step 61.2 s (66 %), data_wait 3.0 s (3 %), … ; goodput 0.66`."""
    wall = summary["time/wall"]
    parts = [f"{k} {summary[f'time/{k}']:.1f} s ({100 * summary[f'time/{k}'] / wall:.0f} %)" for k in CATEGORIES
             if summary.get(f"time/{k}", 0.0) >= 0.05]
    return f"wall {wall:.1f} s: " + ", ".join(parts) + f"; goodput {summary['goodput']:.2f}"
