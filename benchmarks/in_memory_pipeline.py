"""Images/s of the CIFAR-size train input pipeline from image files vs decoded once into memory (`data.in_memory`).

    python benchmarks/in_memory_pipeline.py --folder=/tmp/data/cifar100 [--split=train] [--images=5000] \
        [--batches=40] [--threads=2]

Both read the same `--images` examples (the first of the split's fixed shuffled order, `sources.nested_subset`)
through `pipeline.train_iterator` with `configs/cifar10_vit.py`'s transform (pad 4 + random 32-px crop, flip, uint8
out), batch 128, `--threads` grain reader threads. Printed per source: the time to build it (listing; for the
in-memory one also reading and decoding every image) and images/s over `--batches` batches after one warm-up batch,
the best of `--repeats` (the machine is shared: the best run is the least disturbed one). Also checked: the two
sources give the same batches, bit for bit.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def images_per_second(source, preprocess, batches: int, threads: int, batch: int = 128) -> tuple[float, list]:
    from vit_jax_struct.data import pipeline

    it = pipeline.train_iterator(source, preprocess, batch, seed=0, num_threads=threads)
    first = next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch / (time.perf_counter() - t0), first


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--folder", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    import numpy as np

    from vit_jax_struct.data import preprocess, sources

    pp = preprocess.TrainPreprocess(32, crop="pad", pad=4, flip=True, value_range=None)
    t0 = time.perf_counter()
    files = sources.nested_subset(sources.ImageFolderSource(a.folder, a.split), examples=a.images)
    t_files = time.perf_counter() - t0
    t0 = time.perf_counter()
    memory = sources.InMemorySource(files, num_threads=max(2, a.threads))
    t_mem = time.perf_counter() - t0
    rows = []
    firsts = []
    for name, source, built in (("image files", files, t_files), ("in memory", memory, t_mem)):
        best, first = 0.0, None
        for _ in range(a.repeats):
            rate, first = images_per_second(source, pp, a.batches, a.threads)
            best = max(best, rate)
        firsts.append(first)
        rows.append(f"| {name} | {built:.1f} | {best:.0f} |")
    same = all(np.array_equal(firsts[0][k], firsts[1][k]) for k in ("image", "label"))
    print(f"{a.images:,} images of {a.folder}/{a.split}, batch 128, {a.threads} reader threads, "
          f"{os.cpu_count()} CPUs; same batches: {same}")
    print("| source | build (s) | images/s |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
