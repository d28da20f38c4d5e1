"""Decode every example of a dataset once, in parallel, and list the unreadable ones.

    python main.py --mode=verify --config=configs/cifar10_vit.py --config.data.root=/data/cifar10 [--verify_workers=8]
    python -m vit_jax_struct.data.verify --config=… (the same)

Training decodes lazily, so a corrupt file would otherwise surface only when the shuffle reaches it — possibly days
into an ImageNet-scale run. Verify first, then fix or delete the files it lists (or train with
`--config.data.decode_errors=skip`, which replaces them deterministically and counts them as `data/skipped`).
"""

from __future__ import annotations

import concurrent.futures
import os
import sys

from absl import logging

from vit_jax_struct.data import sources


def verify_source(source, name: str = "", workers: int | None = None) -> list[str]:
    """Reads (decodes) every example of `source` with `workers` threads; returns `"<file or index>: <error>"` for
    each one that fails, in index order. Shows a progress bar with an ETA (tqdm) on stderr.

    Args:
      source: any random-access source of `sources` (`__len__`, `__getitem__`).
      name: a label for the progress bar (e.g. the split).
      workers: decoding threads (default: the CPU count).
    """
    from tqdm import tqdm

    workers = workers or os.cpu_count() or 1
    n = len(source)

    def read(i):
        try:
            source[i]
            return None
        except Exception as e:
            where = source.describe(i) if hasattr(source, "describe") else f"example {i}"
            return f"{where}: {e}"

    bad = []
    with concurrent.futures.ThreadPoolExecutor(workers) as pool, \
            tqdm(total=n, desc=f"verify {name}".strip(), unit="img", file=sys.stderr, mininterval=1.0) as bar:
        for i, err in enumerate(pool.map(read, range(n), chunksize=64)):
            if err:
                bad.append(err)
            if i % 64 == 63 or i == n - 1:
                bar.update(i + 1 - bar.n)
    return bad


def verify_config(config, workers: int | None = None) -> list[str]:
    """Verifies the train and eval splits of `config.data` (the whole splits, before any subsetting); logs each
    unreadable example and a summary; returns the list of problems (empty: every example decodes).

    Raises:
      FileNotFoundError / ValueError: the data cannot be listed at all (as training would at start-up).
    """
    data = config.data
    train = sources.get_source(data, data.train_split)
    splits = [(data.train_split, train),
              (data.eval_split, sources.get_source(data, data.eval_split, getattr(train, "class_names", None)))]
    bad = []
    for split, src in splits:
        found = verify_source(src, split, workers)
        for line in found:
            logging.error("unreadable (%s): %s", split, line)
        logging.info("verify %s: %d examples, %d unreadable", split, len(src), len(found))
        bad += found
    print(f"verified {sum(len(s) for _, s in splits)} examples in {len(splits)} splits: {len(bad)} unreadable"
          + "".join(f"\n  {b}" for b in bad))
    return bad


if __name__ == "__main__":
    from absl import app, flags
    from ml_collections import config_flags

    _C = config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment config file.")
    _W = flags.DEFINE_integer("verify_workers", 0, "decoding threads (0: one per CPU core)")
    app.run(lambda argv: sys.exit(1 if verify_config(_C.value, _W.value or None) else 0))
