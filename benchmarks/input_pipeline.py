"""Images/s of the 224-px train input pipeline on an image folder, ours (grain threads or worker processes, with and
without reduced-size JPEG decoding) beside torchvision's, in one run.

    python benchmarks/input_pipeline.py --folder=/path/to/images --split=. [--images=640] \
        [--torch_python=/tmp/tvenv/bin/python] [--out=/tmp/input_pipeline_table.md]

Ours: `ImageFolderSource` -> `TrainPreprocess` (inception crop, area 5–100 %, bilinear resize to 224, flip, uint8
out as the trainer uses it) through `pipeline.train_iterator`, batch 32: decoded in the source at full size by Pillow,
or lazy records decoded in `TrainPreprocess` by Pillow (`Image.draft`) or simplejpeg (`pp.jpeg_decoder`), at full
size or reduced when the crop allows (`pp.jpeg_draft`; Pillow + draft is what the trainer does for folders),
with 1 and 2 grain reader threads in this process (`data.worker_count=0`) or 1 and 2 grain worker processes with one
reader thread each (`data.worker_count=1, 2`); plus the default with RandAugment(2, 15) on threads.
torchvision: `ImageFolder` + `RandomResizedCrop(224, scale=(0.05, 1))` + `RandomHorizontalFlip` + `PILToTensor`
(uint8) through a `DataLoader` with 1 and 2 worker processes — run with `--torch_python` (a venv with torch and
torchvision; never installed into the project's environment) or in this interpreter if it has torchvision.
Each row: images/s after one warm-up batch (which also starts the worker processes), over `--images` images (the
folder is cycled), page-cached files; the best of `--repeats` runs (the machine is shared, so the best run is the
least disturbed one). Also printed: the mean |reduced - full| pixel difference over the folder's photos.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def bench_ours(folder, split, images, parallel, workers=False, draft=False, randaug=0, batch=32,
               decoder="pillow", lazy=None):
    """images/s of our pipeline with `parallel` reader threads (`workers=False`) or worker processes (True).

    `lazy` (default: `draft`): the source hands undecoded files to `TrainPreprocess`, which decodes them with
    `decoder` (`pp.jpeg_decoder`); otherwise the source decodes them at full size with Pillow."""
    from vit_jax_struct.data import pipeline, preprocess, sources

    src = sources.ImageFolderSource(folder, split, lazy=draft if lazy is None else lazy)
    tp = preprocess.TrainPreprocess(224, "inception", 0.05, flip=True, value_range=None,
                                    randaug_layers=2 if randaug else 0, randaug_magnitude=15, jpeg_draft=draft,
                                    jpeg_decoder=decoder)
    it = pipeline.train_iterator(src, tp, batch, seed=0, num_threads=1 if workers else parallel,
                                 prefetch=2 * batch, worker_count=parallel if workers else 0)
    next(it)  # warm-up: threads or processes started, first files read
    n_batches = max(1, images // batch)
    t = time.perf_counter()
    for _ in range(n_batches):
        b = next(it)
    dt = time.perf_counter() - t
    assert b["image"].shape == (batch, 224, 224, 3)
    return n_batches * batch / dt, str(b["image"].dtype)


def draft_difference(folder, split, per_image=4, decoder="pillow"):
    """Mean |draft - full decode| in uint8 levels of 224-px inception crops, over the folder (same rng per pair):
    reduced-size decoding by `decoder` against Pillow's full-size decode."""
    import numpy as np

    from vit_jax_struct.data import preprocess, sources

    lazy, eager = sources.ImageFolderSource(folder, split, lazy=True), sources.ImageFolderSource(folder, split)
    on = preprocess.TrainPreprocess(224, "inception", 0.05, flip=False, value_range=None, jpeg_draft=True,
                                    jpeg_decoder=decoder)
    off = preprocess.TrainPreprocess(224, "inception", 0.05, flip=False, value_range=None, jpeg_draft=False,
                                     jpeg_decoder="pillow")
    d = [np.abs(on(lazy[i], np.random.default_rng(k))["image"].astype(int)
         - off(eager[i], np.random.default_rng(k))["image"].astype(int)).mean()
         for i in range(len(lazy)) for k in range(per_image)]
    return float(np.mean(d)), float(np.max(d))


def bench_torchvision(folder, split, images, workers, batch=32):
    import torch
    from torchvision import datasets, transforms

    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(224, scale=(0.05, 1.0)), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = datasets.ImageFolder(os.path.join(folder, split), transform=tf)
    reps = max(1, -(-(images + 2 * batch) // len(ds)))
    ds = torch.utils.data.ConcatDataset([ds] * reps)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                         drop_last=True, persistent_workers=False,
                                         worker_init_fn=lambda _: torch.set_num_threads(1))
    it = iter(loader)
    next(it)
    n_batches = max(1, images // batch)
    t = time.perf_counter()
    for _ in range(n_batches):
        x, _ = next(it)
    dt = time.perf_counter() - t
    assert tuple(x.shape) == (batch, 3, 224, 224)
    return n_batches * batch / dt, str(x.dtype)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--folder", required=True, help="image-folder root: <folder>/<split>/<class>/*.jpg")
    p.add_argument("--split", default=".", help="sub-folder holding the class folders")
    p.add_argument("--images", type=int, default=600, help="images timed per row")
    p.add_argument("--repeats", type=int, default=3, help="runs per row; the best is reported")
    p.add_argument("--torch_python", default="", help="python of a venv with torch + torchvision")
    p.add_argument("--only", default="", help=argparse.SUPPRESS)  # "torchvision": child mode, prints JSON
    p.add_argument("--out", default="", help="write the markdown table here")
    a = p.parse_args(argv)
    if a.only == "torchvision":
        print(json.dumps({w: max(bench_torchvision(a.folder, a.split, a.images, w) for _ in range(a.repeats))
                          for w in (1, 2)}))
        return None
    rows = []
    sj = dict(decoder="simplejpeg", lazy=True)
    for name, par, kw in [("ours: Pillow, full decode (in the source)", "grain threads", dict()),
                          ("ours: Pillow, draft decode (the default)", "grain threads", dict(draft=True)),
                          ("ours: simplejpeg, full decode", "grain threads", sj),
                          ("ours: simplejpeg, reduced decode", "grain threads", dict(draft=True, **sj)),
                          ("ours: Pillow, full decode (in the source)", "grain processes", dict(workers=True)),
                          ("ours: Pillow, draft decode (the default)", "grain processes",
                           dict(workers=True, draft=True)),
                          ("ours: the default + RandAugment(2, 15)", "grain threads", dict(draft=True, randaug=1))]:
        r = {n: max(bench_ours(a.folder, a.split, a.images, n, **kw) for _ in range(a.repeats)) for n in (1, 2)}
        rows.append((name, par, r))
        print(name, par, {n: round(v[0], 1) for n, v in r.items()}, flush=True)
    tv = None
    if a.torch_python:
        cmd = [a.torch_python, os.path.abspath(__file__), f"--folder={a.folder}", f"--split={a.split}",
               f"--images={a.images}", f"--repeats={a.repeats}", "--only=torchvision"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": ""})
        tv = {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}
    else:
        try:
            tv = {w: max(bench_torchvision(a.folder, a.split, a.images, w) for _ in range(a.repeats))
                  for w in (1, 2)}
        except ImportError:
            print("torchvision not importable: its rows are skipped (use --torch_python)")
    if tv:
        rows.append(("torchvision: ImageFolder + RandomResizedCrop + flip, uint8", "DataLoader processes", tv))
        print("torchvision", {w: round(v[0], 1) for w, v in tv.items()}, flush=True)
    ref = tv[1][0] if tv else None
    lines = ["| pipeline (224 px train, batch 32, uint8) | parallelism | 1 | 2 | 2 vs 1 | 1 vs torchvision 1 |",
             "|---|---|---|---|---|---|"]
    for name, par, r in rows:
        vs = f"{r[1][0] / ref:.2f}x" if ref else "–"
        lines.append(f"| {name} | {par} | {r[1][0]:.0f} | {r[2][0]:.0f} | {r[2][0] / r[1][0]:.2f}x | {vs} |")
    for decoder in ("pillow", "simplejpeg"):
        mean_d, max_d = draft_difference(a.folder, a.split, decoder=decoder)
        lines.append(f"\nmean |{decoder} reduced - Pillow full decode| of 224-px crops: {mean_d:.2f} uint8 levels "
                     f"(worst photo {max_d:.2f})")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")
    return rows


if __name__ == "__main__":
    main()
