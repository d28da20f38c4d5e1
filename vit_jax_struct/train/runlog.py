"""The run's own log, `workdir/log.txt`, and the lines that say what a run is doing.

`RunLog` (process 0) collects every Python/absl log record from the moment a run starts; the records are held in
memory until the run has passed its checks and `open(workdir)` is called (so a run that fails its checks writes
nothing), then they go to `workdir/log.txt`: appended line by line on a local disk, or, for a `gs://` workdir (objects
have no append), kept in memory and uploaded whole by `flush()`, which `train/metrics.py:MetricWriter` calls with
every upload of the metrics. A resumed run appends to the same file.

`data_line`, `augmentation_line` and `closing_line` are the start-up and closing summaries the trainer logs.
"""

from __future__ import annotations

import collections
import logging as logging_std
import re
import sys

import jax
from absl import logging as absl_logging

from vit_jax_struct import storage

_QUIET_LIBRARIES = ("orbax", "grain", "array_record", "gcsfs", "fsspec")


# Orbax warnings about a checkpoint manager opened read-only on purpose (restoring, analysing, reading init_from).
_EXPECTED_WARNINGS = ("CheckpointManagerOptions.read_only=True", "Given directory is read only")


class QuietLibraries(logging_std.Filter):
    """Drops INFO chatter of orbax and grain (every save logs dozens of lines) and orbax's warnings that a manager
    opened read-only on purpose is read-only; their other warnings still show."""

    def filter(self, record):
        quiet = any(f"/{lib}/" in record.pathname for lib in _QUIET_LIBRARIES)
        if not quiet:
            return True
        return record.levelno >= logging_std.WARNING and not record.getMessage().startswith(_EXPECTED_WARNINGS)


# Where the ERROR records of a failing background write come from: Orbax logs every failed array write of a save with
# its traceback, asyncio every orphaned task's exception: about a thousand lines for one full disk.
_ERROR_SOURCES = ("/orbax/", "/tensorstore/", "/asyncio/", "/grain/", "/concurrent/futures/", "/gcsfs/", "/fsspec/",
                  "/aiohttp/", "/google/cloud/storage/", "/google/api_core/")


class LibraryErrors:
    """A digest of library errors: held back from stderr (the run's own `error:` line says what failed), written once
    per distinct message to log.txt without the traceback, and counted (`summary()`). `show(True)` (`--traceback`)
    lets every record through as the library logged it.

    Messages are the same when they differ only in quoted names and numbers (the array file, the task number).
    """

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        self.first: dict[str, str] = {}
        self.shown = False

    def reset(self) -> None:
        self.counts.clear()
        self.first.clear()

    def show(self, shown: bool) -> None:
        self.shown = bool(shown)

    @staticmethod
    def is_library_error(record) -> bool:
        return record.levelno >= logging_std.ERROR and any(s in record.pathname for s in _ERROR_SOURCES)

    @staticmethod
    def text_of(record) -> str:
        """The record's message and its exception's first line, as one line."""
        text = record.getMessage().strip().splitlines()[0] if record.getMessage().strip() else ""
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            text = f"{text}: {short_error(exc, 300)}" if text else short_error(exc, 300)
        return text

    def add(self, text: str) -> bool:
        """Counts one occurrence of `text`; True if it is the first of its kind."""
        key = re.sub(r"\d+", "N", re.sub(r'"[^"]*"|\'[^\']*\'', '"…"', re.sub(r"^(\[[^]]*\])+\s*", "", text)))
        self.counts[key] += 1
        if key in self.first:
            return False
        self.first[key] = text
        return True

    def record_seen(self, record) -> bool:
        """Counts `record` once (whichever handler sees it first); True if its message is the first of its kind."""
        first = getattr(record, "_library_error_first", None)
        if first is None:
            first = self.add(self.text_of(record))
            record._library_error_first = first
        return first

    def summary(self) -> str | None:
        """One line: how many library error records were held back, each distinct message with its count."""
        if not self.counts:
            return None
        parts = [f"{n}x {self.first[k][:300]}" for k, n in self.counts.most_common(5)]
        more = len(self.counts) - len(parts)
        return (f"library errors held back from stderr: {sum(self.counts.values())} records, {len(self.counts)} "
                f"distinct: " + " | ".join(parts) + (f" | … {more} more" if more > 0 else ""))


LIBRARY_ERRORS = LibraryErrors()


class HoldBackLibraryErrors(logging_std.Filter):
    """For the stderr handler: drops library errors (counted in `LIBRARY_ERRORS`) unless `--traceback` is given."""

    def filter(self, record):
        if LIBRARY_ERRORS.shown or not LibraryErrors.is_library_error(record):
            return True
        LIBRARY_ERRORS.record_seen(record)
        return False


def _hook_text(exc_type, exc_value, exc_traceback) -> str | None:
    """The one-line text of an exception raised in a library's thread or finaliser, or None if not a library's."""
    tb, frames = exc_traceback, []
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    if not any(s in f for f in frames for s in _ERROR_SOURCES):
        return None
    return short_error(exc_value if exc_value is not None else exc_type(), 300)


def hold_back_library_errors(hold: bool) -> None:
    """Installs the digest on stderr: absl's handler gets `HoldBackLibraryErrors`, and exceptions a library's
    background thread or an asyncio finaliser would print as a bare traceback (`Event loop is closed` after a failed
    save) are counted instead. `hold=False` (`--traceback`): everything shows as the libraries print it."""
    import sys
    import threading

    LIBRARY_ERRORS.show(not hold)
    absl_logging.get_absl_handler().addFilter(HoldBackLibraryErrors())
    if not hold:
        return
    def counting(hook):  # a hook that counts a library's exception and hands any other to `hook`
        def on_error(args):
            text = _hook_text(args.exc_type, args.exc_value, args.exc_traceback)
            if text is None:
                hook(args)
            else:
                LIBRARY_ERRORS.add(text)
        return on_error

    threading.excepthook, sys.unraisablehook = counting(threading.excepthook), counting(sys.unraisablehook)


class RunLog(logging_std.Handler):
    """A logging handler writing the run's records to `workdir/log.txt` (process 0; other processes: inactive).

    Attach with `start()` (records are buffered), `open(workdir)` once the workdir may be written, `flush()` to upload
    (object stores), `close()` at the end (also detaches). `note(text)` writes a line to the file only (e.g. the final
    `error:` line, which `main.py` prints to stderr itself).

    Once the run is under way, a write to log.txt that fails (disk full, folder gone) is said once on stderr, as one
    `warning:` line naming the file, and later records are not written to it: a log call never raises and never
    prints a traceback, and the error that stops the run (the checkpointer's or the metrics writer's, on the same
    fault) stays the one reported. `write_error` holds the first failure (None: none).

    Raises (from `open`, `flush`):
      storage.StorageError: log.txt cannot be written (names it).
    """

    def __init__(self):
        super().__init__(level=logging_std.INFO)
        self.setFormatter(absl_logging.PythonFormatter())
        self.addFilter(QuietLibraries())
        self.active = jax.process_index() == 0
        self.path = None
        self._lines: list[str] = []  # before open(), and for an object store
        self._file = None
        self._dirty = False
        self._summary_written = None
        self.write_error: Exception | None = None

    def start(self) -> RunLog:
        LIBRARY_ERRORS.reset()
        if self.active:
            logging_std.getLogger().addHandler(self)
        return self

    def emit(self, record):
        try:
            if LibraryErrors.is_library_error(record) and not LIBRARY_ERRORS.shown:
                if LIBRARY_ERRORS.record_seen(record):  # the first of its kind, as one line; the rest counted
                    line = self.formatter.format(logging_std.makeLogRecord(
                        {**record.__dict__, "msg": LibraryErrors.text_of(record), "args": None, "exc_info": None,
                         "exc_text": None}))
                    self._write(line + "  (repeats are counted, not written)")
                return
            self._write(self.format(record))
        except Exception as e:  # A failing log file must not fail the run from inside a log call.
            self._write_failed(e)

    def handleError(self, record) -> None:
        """Formatting or writing `record` failed: said once in one line (logging's default prints a traceback)."""
        self._write_failed(sys.exc_info()[1])

    def _write_failed(self, e: BaseException | None) -> None:
        if self.write_error is None:
            self.write_error = e if isinstance(e, Exception) else RuntimeError(str(e))
            sys.stderr.write(f"warning: {short_error(self.write_error)}; later lines are not written to it\n")
            sys.stderr.flush()

    def _write(self, line: str) -> None:
        if self.write_error is not None:
            return
        if self._file is not None:
            try:
                storage.append_line(self._file, self.path, line)
            except storage.StorageError as e:
                self._write_failed(e)
        else:
            self._lines.append(line)
            self._dirty = True

    def note_library_errors(self) -> None:
        """Writes the one-line digest of the library errors held back from stderr (once; nothing if none)."""
        summary = LIBRARY_ERRORS.summary()
        if summary and summary != self._summary_written:
            self.note(summary)
            self._summary_written = summary

    def note(self, text: str) -> None:
        """Writes `text` to log.txt only (not to stderr)."""
        if self.active:
            self._write(text)

    def open(self, workdir: str) -> None:
        """Starts writing `workdir/log.txt` (appending to an earlier run's), beginning with the buffered records."""
        if not self.active:
            return
        self.path = storage.join(workdir, "log.txt")
        if storage.is_url(workdir):
            old = storage.read_text(self.path).splitlines() if storage.exists(self.path) else []
            self._lines = old + self._lines
            self.flush()
            return
        try:
            self._file = open(str(storage.path(self.path)), "a")  # noqa: SIM115 -- closed in close()
        except OSError as e:
            raise storage.StorageError(f"cannot write {self.path}: {e}") from e
        lines, self._lines = self._lines, []
        for line in lines:
            storage.append_line(self._file, self.path, line)

    def flush(self) -> None:
        """Makes the records durable (an object store: one upload of the whole file if anything changed)."""
        if not self.active or self.path is None:
            return
        if self._file is not None:
            self._file.flush()
        elif self._dirty:
            storage.write_text(self.path, "".join(line + "\n" for line in self._lines))
            self._dirty = False

    def close(self, upload: bool = True) -> None:
        """Detaches the handler and closes the file (uploads it first if `upload`; an object store only). The counts
        of library errors held back (`LIBRARY_ERRORS`) are written first, as one line."""
        logging_std.getLogger().removeHandler(self)
        if not self.active:
            return
        self.note_library_errors()
        try:
            if upload:
                self.flush()
        finally:
            if self._file is not None:
                self._file.close()
            self._file, self.active = None, False
            super().close()


def data_line(config, parts) -> str:
    """One line on the data found: source, root or name, classes, examples per split (and the subset used), image
    size. `parts`: `trainer.build`'s dict."""
    d = config.data
    where = {"folder": f" {d.get('root')}", "tfds": f" {d.get('name')}" + (f" in {d.root}" if d.get("root") else "")
             }.get(d.source, "")
    train, full = len(parts["train_source"]), parts.get("full_train_examples", len(parts["train_source"]))
    ev = len(parts["eval_source"])
    subset = f" (using {train:,}: {100 * train / max(full, 1):.3g} %)" if train < full else ""
    every = " (evenly spread subset)" if d.get("eval_examples") else ""
    return (f"data: {d.source}{where}; {parts['num_classes']} classes; train split {d.train_split!r}: {full:,} "
            f"examples{subset}; eval split {d.eval_split!r}: {ev:,} examples{every}; images {d.image_size}x"
            f"{d.image_size} px" + ("; decoded once, held in memory (data.in_memory)" if d.get("in_memory") else ""))


def augmentation_line(config) -> str:
    """One line on the preprocessing and augmentation in force: crop, flip, RandAugment, mixup/CutMix, patch
    permutation, label smoothing."""
    pp, m = config.pp, config.get("mixup", {})
    crop = pp.get("train_crop", "inception")
    crop_text = {"inception": f"inception crop (area ≥ {pp.get('crop_area_min', 0.05):g})",
                 "pad": f"pad {pp.get('pad', 4)} + random crop", "none": "resize only"}.get(crop, crop)
    parts = [f"train {crop_text}", "flip" if pp.get("flip", True) else "no flip"]
    layers = pp.get("randaug_layers", 0)
    parts.append(f"RandAugment({layers}, {pp.get('randaug_magnitude', 10)})" if layers else "no RandAugment")
    mix = []
    if m.get("alpha", 0.0):
        mix.append(f"mixup α={m['alpha']:g}")
    if m.get("cutmix_alpha", 0.0):
        mix.append(f"CutMix α={m['cutmix_alpha']:g}")
    if mix:
        switch = f", switch {m.get('switch_prob', 0.5):g}" if len(mix) == 2 else ""
        parts.append(" + ".join(mix) + f" (prob {m.get('prob', 1.0):g}{switch})")
    else:
        parts.append("no mixup/CutMix")
    if config.get("label_smoothing", 0.0):
        parts.append(f"label smoothing {config.label_smoothing:g}")
    if config.data.get("permute_patches"):
        parts.append(f"patches permuted (seed {config.data.get('permutation_seed', 0)})")
    parts.append(f"eval centre crop {pp.get('eval_crop_fraction', 0.875):g}")
    parts.append(f"per-channel mean/std normalisation {pp.normalize!r}" if pp.get("normalize") else
                 f"values in {tuple(pp.get('value_range', (-1.0, 1.0)))}")
    return "preprocessing: " + ", ".join(parts)


def eval_cost_line(config, eval_examples: int, fewshot_sets: dict | None) -> str:
    """One start-up line on what evaluation costs, in forward passes against the training between two evaluations,
    e.g. `evaluation: every 500 steps 10,000 images; few-shot every 500 steps 5,797 images (cifar10 2,000 + 1,000,
    digits 1,437 + 360); ≈ 7 % of the work between evaluations (a forward pass ≈ 1/3 of a train step's work per
    image)`. `fewshot_sets`: `{name: (train examples, test examples)}` or None (off)."""
    batch = config.batch_size
    eval_every = config.get("eval_every_steps", 0) or config.total_steps
    parts = [f"evaluation: every {eval_every:,} steps {eval_examples:,} images"]
    forward = eval_examples / eval_every
    if fewshot_sets:
        fs_every = config.fewshot.every_steps
        n = sum(a + b for a, b in fewshot_sets.values())
        detail = ", ".join(f"{k} {a:,} + {b:,}" for k, (a, b) in fewshot_sets.items())
        parts.append(f"few-shot every {fs_every:,} steps {n:,} images ({detail})")
        forward += n / fs_every
    share = forward / (forward + 3 * batch)
    return "; ".join(parts) + (f"; ≈ {100 * share:.0f} % of the work between evaluations (a forward pass ≈ 1/3 of a train "
                               "step's work per image)")


def closing_line(workdir: str, step: int, final: dict, outputs: list[str]) -> str:
    """`done: step N; eval/accuracy 0.97, …; goodput 0.61; outputs: <paths>` (final metrics with a `/` or goodput)."""
    shown = [f"{k} {v:.4g}" for k, v in final.items()
             if k.startswith(("eval/", "fewshot/")) or k in ("train/loss", "goodput")]
    return (f"done: step {step}; " + ", ".join(shown) + f"; outputs in {workdir}: " + ", ".join(outputs))


def code_version() -> str:
    """The code a run trains with, for its log and `final_metrics.json` ("code"): the git commit (12 hex digits) of
    the checkout this package is imported from, `+modified` when tracked files differ from it; "unknown" outside a
    git checkout or without git. Runs trained by different code can then be told apart (report.py's runs.csv)."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*args):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=20,
                              check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+modified" if dirty else "") if head else "unknown"


def short_error(e: BaseException, limit: int = 400) -> str:
    """`Type: first line of the message`, cut to `limit` characters (TensorStore errors carry a whole JSON spec)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(text) > limit:
        text = text[:limit] + " …"
    return f"{type(e).__name__}: {text}" if text else type(e).__name__

