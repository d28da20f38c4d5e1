"""Checkpoint I/O of a ViT-B/16 train state (86.6 M parameters + Adam's two moments, float32: ≈ 1.04 GB): save and
restore time to a local folder and to a gs:// bucket on the GCS emulator (fake-gcs-server on 127.0.0.1, as in the
tests), and the step-time overhead of an asynchronous save during training.

    python benchmarks/checkpoint_io.py [--image_size=64] [--batch=8] [--steps=6] \
        [--out=benchmarks/results/checkpoint_io.jsonl]

The emulator stores objects on the local disk through HTTP, so its figures are an upper bound of the client-side
cost (serialisation, request handling, tensorstore's OCDBT writes), not of Cloud Storage's bandwidth. Training uses
`--image_size` px images (64 by default: the parameter count is that of 224 px but for the posemb, and a CPU step
takes about a second instead of twenty). Each save is waited for before the next measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/vit_b16.py")
    ap.add_argument("--image_size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6, help="train steps timed with and without a save in flight")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    from benchmarks import common
    from tests.gcs_emulator import Emulator
    from vit_jax_struct.train import checkpoint, sharding, trainer

    emu = Emulator().start()
    os.environ.update(emu.env())
    bucket = emu.bucket("bench")

    c = common.load_config(args.config, "runlocal")
    c.data.image_size, c.batch_size, c.total_steps = args.image_size, args.batch, 1000
    c.optim.warmup_steps = 10
    parts = trainer.build(c)
    state = parts["init_state"](jax.random.key(0))
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    mesh = parts["mesh"]
    state_sh = jax.tree.map(lambda s: s.sharding, parts["abstract_state"])
    step_fn = trainer.make_train_step(c, parts["model"], parts["tx"], parts["schedule"], parts["num_classes"], mesh,
                                      state_sh)
    rng = np.random.default_rng(0)
    batch = sharding.global_batch({
        "image": rng.integers(0, 256, (args.batch, args.image_size, args.image_size, 3), dtype=np.uint8),
        "label": rng.integers(0, parts["num_classes"], args.batch).astype(np.int32)}, mesh)
    import grain

    it = iter(grain.MapDataset.range(10).to_iter_dataset())
    rows = []

    def record(**kw):
        row = {"state_gb": round(nbytes / 1e9, 3), **kw}
        rows.append(row)
        print(json.dumps(row), flush=True)

    for where in ("local", "gcs-emulator"):
        target = tempfile.mkdtemp(prefix="ckpt-bench-") if where == "local" else f"{bucket}/ckpt"
        ck = checkpoint.Checkpointer(f"{target}/checkpoints", keep=2)
        jax.block_until_ready(state)
        t0 = time.time()
        ck.save(1, state, it)
        t_block = time.time() - t0
        ck.wait()
        t_save = time.time() - t0
        t0 = time.time()
        restored = ck.restore(1, parts["abstract_state"])
        jax.block_until_ready(restored)
        t_restore = time.time() - t0
        ck.close()
        del restored
        record(kind="save_restore", where=where, save_blocking_s=round(t_block, 2), save_total_s=round(t_save, 2),
               restore_s=round(t_restore, 2), save_gb_per_s=round(nbytes / 1e9 / t_save, 3))

    # Step time with and without an async save of the whole state in flight (local disk, then the emulator).
    state, _ = step_fn(state, batch)  # compile
    jax.block_until_ready(state)

    def timed_steps(n):
        nonlocal state
        times = []
        for _ in range(n):
            t = time.time()
            state, m = step_fn(state, batch)
            jax.block_until_ready(m)
            times.append(time.time() - t)
        return times

    base = timed_steps(args.steps)
    for where in ("local", "gcs-emulator"):
        target = tempfile.mkdtemp(prefix="ckpt-bench-") if where == "local" else f"{bucket}/ckpt-async"
        ck = checkpoint.Checkpointer(f"{target}/checkpoints", keep=2)
        t0 = time.time()
        ck.save(int(jax.device_get(state["step"])), state, it)
        t_block = time.time() - t0
        during = timed_steps(args.steps)
        t_wait = time.time()
        ck.wait()
        finished_after = time.time() - t0
        waited = time.time() - t_wait
        ck.close()
        record(kind="async_overhead", where=where, image_size=args.image_size, batch=args.batch,
               step_s_without_save=round(float(np.median(base)), 3),
               step_s_with_save_in_flight=round(float(np.median(during)), 3),
               overhead=round(float(np.median(during) / np.median(base) - 1), 3), save_blocking_s=round(t_block, 2),
               save_finished_after_s=round(finished_after, 2), waited_at_end_s=round(waited, 2))
    emu.stop()
    if args.out:
        common.append_results(args.out, rows, config=args.config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
