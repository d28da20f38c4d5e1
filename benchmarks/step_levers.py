"""Train-step time of the embedded default and the grid-8 sweep model under XLA:CPU levers, one at a time.

    python benchmarks/step_levers.py [--models=default,grid8] [--levers=all] [--rounds=3] [--out=FILE.jsonl]

Each (model, lever) runs in its own process (XLA flags are read once per process): the real jitted step of
`trainer.make_train_step` with the model's input on the device (uint8 batch, pad crop in the step), its state fed
back, after one compiling call and 5 warm-up steps; timed as `--rounds` rounds of `--steps` steps, the fastest round
reported (ms per step; the machine is shared, the fastest round is the least disturbed). Models: `default`
(`configs/default.py`: Ti/4 width 64, depth 4, MLP 256, 16 px, batch 64) and `grid8` (the grid-8 sweep model:
Ti/4 width 64, depth 6, 4 heads, MLP 128, 32 px, batch 128). Levers: XLA:CPU flags of the installed jaxlib (the
library fusions: YNNPACK dot-only or off, XNNPACK off, oneDNN dot fusion and custom calls; Eigen's thread pool off)
and `1core` (the process pinned to one core with `taskset`: the other core free for a second run, `--jobs=2`).
The first lever, `none`, is the baseline. Printed: ms/step, img/s and the ratio to `none` (> 1: faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEVERS = {
    "none": ("", False),
    "ynn_dot_only": ("--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT", False),
    "ynn_off": ("--xla_cpu_experimental_ynn_fusion_type=", False),
    "xnnpack_off": ("--xla_cpu_use_xnnpack=false", False),
    "onednn_dot_fusion": ("--xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_DOT", False),
    "onednn_custom_calls": ("--xla_cpu_use_onednn=true", False),
    "eigen_single_thread": ("--xla_cpu_multi_thread_eigen=false", False),
    "1core": ("", True),
}
MODELS = ("default", "grid8")


def _child(model: str, steps: int, rounds: int) -> dict:
    """Runs in the measuring process: `{"ms_per_step", "images_per_sec", "first_call_s"}`."""
    sys.path.insert(0, ROOT)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from configs import default
    from vit_jax_struct.train import trainer

    jax.config.update("jax_threefry_partitionable", True)
    c = default.get_config()
    if model == "grid8":
        c.model.update(width=64, depth=6, num_heads=4, mlp_dim=128)
        c.data.image_size, c.batch_size, c.pp.pad = 32, 128, 4
    parts = trainer.build(c)
    state_sh = jax.tree.map(lambda s: s.sharding, parts["abstract_state"])
    step = trainer.make_train_step(c, parts["model"], parts["tx"], parts["schedule"], parts["num_classes"],
                                   parts["mesh"], state_sh, trainer.make_augment(c, parts))
    s, b = c.data.image_size, c.batch_size
    batch = {"image": jnp.asarray(np.random.default_rng(0).integers(0, 256, (b, s, s, 3), dtype=np.uint8)),
             "label": jnp.asarray(np.arange(b) % 10, jnp.int32)}
    state = parts["init_state"](jax.random.key(0))
    t = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    first = time.perf_counter() - t
    for _ in range(5):
        state, m = step(state, batch)
    jax.block_until_ready(m)
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            state, m = step(state, batch)
        jax.block_until_ready(m)
        best = min(best, (time.perf_counter() - t) / steps)
    return {"ms_per_step": 1e3 * best, "images_per_sec": b / best, "first_call_s": first}


def measure(model: str, lever: str, steps: int, rounds: int) -> dict:
    """One (model, lever) in a fresh process; raises RuntimeError with its stderr tail on failure."""
    flags, one_core = LEVERS[lever]
    env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()}
    cmd = [sys.executable, os.path.abspath(__file__), f"--child={model}", f"--steps={steps}", f"--rounds={rounds}"]
    if one_core:
        cmd = ["taskset", "-c", "0", *cmd]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode or not lines:
        raise RuntimeError(f"{model}/{lever} failed (rc {p.returncode}): {p.stderr[-800:]}")
    return json.loads(lines[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--levers", default="all", help=f"comma-separated among {list(LEVERS)}, or all")
    ap.add_argument("--steps", type=int, default=0, help="steps per round (0: 100 default, 20 grid8)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, a.steps or (100 if a.child == "default" else 20), a.rounds)))
        return
    levers = list(LEVERS) if a.levers == "all" else a.levers.split(",")
    bad = [x for x in levers if x not in LEVERS] + [m for m in a.models.split(",") if m not in MODELS]
    if bad:
        ap.error(f"unknown lever or model {bad}; levers: {list(LEVERS)}, models: {list(MODELS)}")
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name")), "?")
    print(f"CPU: {cpu}; {os.cpu_count()} cores")
    print(f"{'model':8} {'lever':22} {'ms/step':>9} {'img/s':>8} {'vs none':>8}")
    for model in a.models.split(","):
        base = None
        for lever in levers:
            r = measure(model, lever, a.steps or (100 if model == "default" else 20), a.rounds)
            base = base or (r["ms_per_step"] if lever == "none" else None)
            ratio = base / r["ms_per_step"] if base else float("nan")
            print(f"{model:8} {lever:22} {r['ms_per_step']:9.2f} {r['images_per_sec']:8.0f} {ratio:8.2f}",
                  flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps({"model": model, "lever": lever, "cpu": cpu, **r, "vs_none": ratio}) + "\n")


if __name__ == "__main__":
    main()
