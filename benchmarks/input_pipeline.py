"""Images/s of the 224-px train input pipeline on an image folder, ours (grain threads) beside torchvision's.

    python benchmarks/input_pipeline.py --folder=/tmp/imagenet-sample --split=. [--images=600] \
        [--torch_python=/tmp/tvenv/bin/python] [--out=docs/input_pipeline.md]

Ours: `ImageFolderSource` (Pillow decode) -> `TrainPreprocess` (inception crop, area 5–100 %, bilinear resize to
224, flip) through `pipeline.train_iterator` with 1 and 2 reader threads, batch 32; variants: uint8 output (what the
trainer now sends to the device), float32 output scaled on the host (the previous pipeline), and uint8 with
RandAugment(2, 15). torchvision: `ImageFolder` + `RandomResizedCrop(224)` + `RandomHorizontalFlip` + `PILToTensor`
(uint8) through a `DataLoader` with 1 and 2 worker processes — run with `--torch_python` (a venv with torch and
torchvision; never installed into the project's environment) or in this interpreter if it has torchvision.
Each row: images/s after one warm-up batch, over `--images` images (the folder is cycled), page-cached files; the
best of `--repeats` runs (the machine is shared, so the best run is the least disturbed one).
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


def bench_ours(folder, split, images, threads, uint8=True, randaug=0, batch=32):
    from vit_jax_struct.data import pipeline, preprocess, sources

    src = sources.ImageFolderSource(folder, split)
    tp = preprocess.TrainPreprocess(224, "inception", 0.05, flip=True, value_range=None if uint8 else (-1.0, 1.0),
                                    randaug_layers=2 if randaug else 0, randaug_magnitude=15)
    it = pipeline.train_iterator(src, tp, batch, seed=0, num_threads=threads, prefetch=2 * batch)
    next(it)  # warm-up: threads started, first files read
    n_batches = max(1, images // batch)
    t = time.perf_counter()
    for _ in range(n_batches):
        b = next(it)
    dt = time.perf_counter() - t
    assert b["image"].shape == (batch, 224, 224, 3)
    return n_batches * batch / dt, str(b["image"].dtype)


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
    for name, kw in [("ours: uint8 out (device scaling)", dict(uint8=True)),
                     ("ours: float32 out (host scaling, before)", dict(uint8=False)),
                     ("ours: uint8 + RandAugment(2, 15)", dict(uint8=True, randaug=True))]:
        r = {t: max(bench_ours(a.folder, a.split, a.images, t, **kw) for _ in range(a.repeats)) for t in (1, 2)}
        rows.append((name, "grain threads", r))
        print(name, {t: round(v[0], 1) for t, v in r.items()}, flush=True)
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
    lines = ["| pipeline (224 px train, batch 32) | parallelism | output | 1 | 2 | 2 vs 1 |",
             "|---|---|---|---|---|---|"]
    for name, par, r in rows:
        lines.append(f"| {name} | {par} | {r[1][1]} | {r[1][0]:.0f} | {r[2][0]:.0f} | {r[2][0] / r[1][0]:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")
    return rows


if __name__ == "__main__":
    main()
