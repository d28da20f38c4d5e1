"""Export time and file size of a ViT-B/16 train state in each format of `vit_jax_struct.export`.

    python benchmarks/export_weights.py [--config=configs/vit_b16.py] [--repeats=2] \
        [--out=benchmarks/results/export_weights.jsonl]

Builds the config's model (ViT-B/16, 1000 classes, 224 px: 86.6 M parameters; with Adam's two moments a 1.04 GB
train state) on synthetic data, saves its initial train state as an Orbax checkpoint in a temporary workdir, as a
run does, and then times `export.export` for every format on the local disk: reading the parameters back from the
checkpoint (the optimizer state is not read), converting, and writing the file(s) and the sidecar. Reported per
format: the wall time (the best of `--repeats`), the time of the checkpoint read alone, and the bytes written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/vit_b16.py")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    import grain
    import jax
    from absl import logging

    from benchmarks import common
    from vit_jax_struct import export, storage
    from vit_jax_struct.train import checkpoint

    logging.set_verbosity(logging.ERROR)
    c = common.load_config(args.config)
    c.mesh.data, c.mesh.fsdp = 1, 1
    parts = common.build_synthetic(c)
    state = parts["init_state"](jax.random.key(0))
    n_params = sum(x.size for x in jax.tree.leaves(state["params"]))
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    tmp = tempfile.mkdtemp(prefix="export-bench-")
    workdir = os.path.join(tmp, "run")
    ck = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), keep=1)
    ck.save(1, state, iter(grain.MapDataset.range(10).to_iter_dataset()))
    ck.close()
    storage.write_text(os.path.join(workdir, "config.json"), c.to_json_best_effort(indent=2))
    del state

    t0 = time.perf_counter()
    checkpoint.host_params(workdir)
    read_s = time.perf_counter() - t0
    rows = []
    for fmt in export.FORMATS:
        out = os.path.join(tmp, "out_" + fmt + export.SUFFIX[fmt])
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            export.export(workdir, fmt, out, overwrite=True)
            times.append(time.perf_counter() - t0)
        row = {"format": fmt, "export_s": round(min(times), 2), "checkpoint_read_s": round(read_s, 2),
               "bytes": _size(out), "parameters": int(n_params), "train_state_bytes": int(state_bytes),
               "image_size": c.data.image_size, "cpus": os.cpu_count()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    shutil.rmtree(tmp)
    if args.out:
        common.append_results(args.out, rows, config=args.config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
