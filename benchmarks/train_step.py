r"""Throughput of the real train step of a config on synthetic data: images/s, FLOP/s and the fraction of a peak.

    python benchmarks/train_step.py --config=configs/vit_b16.py --batch=16 --steps=6            # this CPU
    python benchmarks/train_step.py --config=configs/vit_b16.py --batch=256 --peak=h200 \
        --config.model.dtype=bfloat16                                                          # one H200
    python benchmarks/train_step.py --config=configs/vit_l16.py --batch=1024 --peak=v4 \
        --config.model.remat_policy=nothing_saveable                                           # a v4 slice

The step is `trainer.make_train_step` of `trainer.build(config)` (data sources replaced by noise, nothing read
from disk): the batch is random images `[B, S, S, 3]` (S = `data.image_size`) and labels, placed once on the
devices with the batch sharding; the state is donated and fed back, as in training. After `--warmup` steps the
timed steps run in `--rounds` rounds (default: one per step); after each round a jitted matmul of the model's biggest
shape,
`[B/devices · N, D] × [D, mlp]` in the model's compute dtype, runs for about as long on device 0. Both are timed
the same way (dispatch, then `block_until_ready`), in wall-clock seconds and in CPU seconds of this process, so on a
shared CPU the two rates see the same contention and their ratio is the meaningful figure (the per-CPU-second ratio
is the steadier one when other processes take the cores).

Printed: images/s; analytic model FLOPs of a ViT (`benchmarks/common.py:vit_flops`, 3× forward, remat recompute not
counted) and XLA's own count (`cost_analysis`); achieved FLOP/s per device; the measured matmul rate; the fraction
of the peak (`--peak`: the matmul rate on CPU, else the named chip's dense bf16 peak); per-device memory from
`compiled.memory_analysis()`. `--out=FILE.jsonl` appends the same as one JSON line.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags
from ml_collections import config_flags

from benchmarks import common

_CONFIG = config_flags.DEFINE_config_file("config", "configs/vit_b16.py", "Config file (file.py[:arg]).",
                                          lock_config=True)
_BATCH = flags.DEFINE_integer("batch", 0, "Global batch (images); 0: the config's batch_size.")
_STEPS = flags.DEFINE_integer("steps", 6, "Timed train steps (split over --rounds).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed train steps after compilation.")
_ROUNDS = flags.DEFINE_integer("rounds", 0, "Timing rounds; each times steps/rounds train steps, then the matmul "
                               "for about as long (0: one round per step, the finest interleaving).")
_PEAK = flags.DEFINE_enum("peak", "auto", ["auto", "cpu", *common.PEAKS],
                          "Peak to divide by: cpu = the matmul rate measured in this run; a chip name = its dense "
                          "bf16 peak per device; auto = cpu on CPU, else from the device kind.")
_MATMUL = flags.DEFINE_bool("matmul", True, "Time the reference matmul between rounds.")
_OUT = flags.DEFINE_string("out", "", "Append the results as one JSON line to this file.")


def _peak_name(devices) -> str:
    if _PEAK.value != "auto":
        return _PEAK.value
    if devices[0].platform == "cpu":
        return "cpu"
    kind = devices[0].device_kind  # e.g. "TPU v4", "TPU v5 lite", "NVIDIA H100 80GB HBM3"
    for name, p in common.PEAKS.items():
        if kind == p["kind"] or (kind.startswith("NVIDIA") and kind.startswith(p["kind"] + " ")):
            return name
    return "none"


def _time(fn, n: int) -> tuple[float, float]:
    """`(wall seconds, process CPU seconds)` of `n` calls of `fn` (each returns arrays), dispatched back to back,
    then waited for. CPU seconds count every thread of this process (XLA's CPU thread pool included)."""
    import jax

    t, c = time.perf_counter(), time.process_time()
    out = None
    for _ in range(n):
        out = fn()
    jax.block_until_ready(out)
    return time.perf_counter() - t, time.process_time() - c


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    from vit_jax_struct.models import DTYPES
    from vit_jax_struct.train import sharding

    config = _CONFIG.value
    if _BATCH.value:
        config.batch_size = _BATCH.value
    n_rounds = _ROUNDS.value or _STEPS.value
    if _STEPS.value < n_rounds or _STEPS.value < 1:
        raise app.UsageError(f"--steps {_STEPS.value} must be positive and at least --rounds {n_rounds}")
    devices = jax.devices()
    parts = common.build_synthetic(config, devices)
    mesh, n_dev = parts["mesh"], parts["mesh"].devices.size
    num_classes = parts["num_classes"]
    is_vit = config.model.get("name", "vit") == "vit"
    fl = common.config_flops(config, num_classes) if is_vit else None  # CNNs: XLA's count, after compiling
    dtype_name = config.model.get("dtype", "float32")
    dtype = DTYPES[dtype_name]
    peak_name = _peak_name(devices)
    load0 = os.getloadavg()[0]

    # Synthetic batch, placed once with the batch sharding (no host-to-device copy inside the timing).
    b, s = config.batch_size, config.data.image_size
    rng = np.random.default_rng(0)
    batch_sh = NamedSharding(mesh, sharding.BATCH_SPEC)
    batch = {"image": jax.device_put(rng.uniform(-1, 1, (b, s, s, 3)).astype(np.float32), batch_sh),
             "label": jax.device_put(rng.integers(0, num_classes, (b,)).astype(np.int32), batch_sh)}
    state = parts["init_state"](jax.random.key(config.seed))

    t = time.perf_counter()
    compiled = parts["train_step"].lower(state, batch).compile()
    compile_s = time.perf_counter() - t
    mem = common.memory_stats(compiled)
    xla_flops = common.cost_flops(compiled)
    if fl is None:
        if not xla_flops:
            raise app.UsageError(f"model {config.model.name!r}: no analytic FLOP count (ViTs only) and XLA's cost "
                                 "analysis gave none")
        fl = {"train_flops": xla_flops * n_dev / b, "source": "XLA cost analysis of the compiled step"}

    holder = {"state": state}

    def step():
        holder["state"], m = compiled(holder["state"], batch)
        return holder["state"], m  # Waiting on these waits for the whole step, optimizer update included.

    # Reference matmul: the MLP's first matmul of one device's share of the batch, in the compute dtype.
    if is_vit:
        arch = parts["model"].arch()
        mm_shape = (max(b // n_dev, 1) * fl["tokens"], arch["width"], arch["mlp_dim"])
    else:  # a CNN has no [tokens, width] x [width, mlp] matmul: a fixed square one of about a conv's size
        mm_shape = (max(b // n_dev, 1) * 64, 256, 256)
    mm_flops = 2.0 * math.prod(mm_shape)
    k1, k2 = jax.random.split(jax.random.key(1))
    lhs = jax.device_put(jax.random.normal(k1, mm_shape[:2], dtype), devices[0])
    rhs = jax.device_put(jax.random.normal(k2, mm_shape[1:], dtype), devices[0])
    matmul = jax.jit(lambda x, y: x @ y).lower(lhs, rhs).compile()

    _time(step, _WARMUP.value)
    if _MATMUL.value:
        _time(lambda: matmul(lhs, rhs), 2)
        one = _time(lambda: matmul(lhs, rhs), 3)[0] / 3

    rounds, steps_done = [], 0
    for r in range(n_rounds):
        n = _STEPS.value // n_rounds + (1 if r < _STEPS.value % n_rounds else 0)
        step_s, step_cpu = _time(step, n)
        steps_done += n
        row = {"steps": n, "step_s": step_s / n, "step_cpu_s": step_cpu / n, "images_per_s": n * b / step_s,
               "model_flops_per_s": n * b * fl["train_flops"] / step_s / n_dev}
        if _MATMUL.value:
            mm_reps = max(3, round(step_s / max(one, 1e-9)))
            mm_s, mm_cpu = _time(lambda: matmul(lhs, rhs), mm_reps)
            one = mm_s / mm_reps
            row.update(matmul_reps=mm_reps, matmul_s=mm_s, matmul_cpu_s=mm_cpu,
                       matmul_flops_per_s=mm_reps * mm_flops / mm_s)
            row["ratio"] = row["model_flops_per_s"] / row["matmul_flops_per_s"]
            # Per CPU-second of this process: less sensitive to other processes taking the cores.
            row["ratio_cpu"] = (n * b * fl["train_flops"] / n_dev / step_cpu) / (mm_reps * mm_flops / mm_cpu)
        rounds.append(row)
    jax.block_until_ready(holder["state"])
    load1 = os.getloadavg()[0]

    total_step_s = sum(r["step_s"] * r["steps"] for r in rounds)
    images_per_s = steps_done * b / total_step_s
    achieved = images_per_s * fl["train_flops"] / n_dev  # model FLOP/s per device
    matmul_rate = None
    ratio_cpu = None
    if _MATMUL.value:
        matmul_rate = sum(r["matmul_reps"] for r in rounds) * mm_flops / sum(r["matmul_s"] for r in rounds)
        ratio_cpu = ((steps_done * b * fl["train_flops"] / n_dev / sum(r["step_cpu_s"] * r["steps"] for r in rounds))
                     / (sum(r["matmul_reps"] for r in rounds) * mm_flops / sum(r["matmul_cpu_s"] for r in rounds)))
    if peak_name == "cpu":
        peak = matmul_rate
    elif peak_name in common.PEAKS:
        peak = common.PEAKS[peak_name]["flops"] / common.PEAKS[peak_name]["devices_per_chip"]
    else:
        peak = None

    variant = config.model.get("variant") or config.model.get("name")
    print(f"model {variant} at {s} px, {num_classes} classes; global batch {b} = {b // n_dev} per device x {n_dev} "
          f"{devices[0].platform} device(s) ({devices[0].device_kind}); mesh {dict(mesh.shape)}")
    print(f"dtype {dtype_name}, remat_policy {config.model.get('remat_policy', 'none')}, scan "
          f"{config.model.get('scan', False)}, accum_steps {config.get('accum_steps', 1)}, optim.mu_dtype "
          f"{config.optim.get('mu_dtype') or 'float32'}")
    if "forward" in fl:
        print(f"analytic FLOPs per image: forward {fl['forward_flops'] / 1e9:.2f} GFLOP ({fl['forward'] / 1e9:.2f} "
              f"GMAC), training {fl['train_flops'] / 1e9:.2f} GFLOP; per step and device "
              f"{b * fl['train_flops'] / n_dev / 1e9:.1f} GFLOP"
              + (f" (XLA cost analysis: {xla_flops / 1e9:.1f} GFLOP)" if xla_flops else ""))
    else:
        print(f"FLOPs per image (XLA cost analysis; no analytic count for {config.model.name}): training "
              f"{fl['train_flops'] / 1e9:.3f} GFLOP; per step and device {xla_flops / 1e9:.1f} GFLOP")
    print(f"compile {compile_s:.1f} s; memory per device (compiled.memory_analysis): "
          + (", ".join(f"{k} {common.format_bytes(v)}" for k, v in mem.items()) if mem else "not available"))
    print(f"{'round':>5} {'steps':>5} {'s/step':>8} {'img/s':>9} {'model TFLOP/s':>14}"
          + (f" {'matmul TFLOP/s':>15} {'ratio':>6} {'ratio/CPU-s':>11}" if _MATMUL.value else ""))
    for i, r in enumerate(rounds):
        print(f"{i:>5} {r['steps']:>5} {r['step_s']:>8.3f} {r['images_per_s']:>9.2f} "
              f"{r['model_flops_per_s'] / 1e12:>14.4f}"
              + (f" {r['matmul_flops_per_s'] / 1e12:>15.4f} {r['ratio']:>6.3f} {r['ratio_cpu']:>11.3f}"
                 if _MATMUL.value else ""))
    print(f"images/s {images_per_s:.2f}; achieved {achieved / 1e12:.4f} TFLOP/s per device (model FLOPs)")
    if matmul_rate:
        print(f"matmul [{mm_shape[0]},{mm_shape[1]}]x[{mm_shape[1]},{mm_shape[2]}] {dtype_name}: "
              f"{matmul_rate / 1e12:.4f} TFLOP/s on device 0; model / matmul = {achieved / matmul_rate:.3f} "
              f"(per CPU-second of this process: {ratio_cpu:.3f})")
    if peak:
        label = "the matmul rate measured in this run" if peak_name == "cpu" else \
            f"{peak_name} dense bf16 peak {peak / 1e12:.0f} TFLOP/s per device"
        print(f"fraction of peak: {achieved / peak:.3f} of {label}")
        if peak_name != "cpu" and dtype_name != "bfloat16":
            print(f"note: the step computes in {dtype_name}; the peak is for bfloat16")
    cores = os.cpu_count()
    if devices[0].platform == "cpu":
        print(f"CPU load average (1 min) {load0:.2f} before, {load1:.2f} after, on {cores} cores: other processes "
              "compete for the same cores, so compare the ratio, not the absolute rates")

    if _OUT.value:
        record = dict(
            time=time.strftime("%Y-%m-%dT%H:%M:%S"), config=common.config_arg_string(),
            overrides=common.config_overrides(), command=" ".join(["python", *sys.argv]), variant=variant,
            image_size=s, batch=b, devices=n_dev, platform=devices[0].platform, device_kind=devices[0].device_kind,
            dtype=dtype_name, remat_policy=config.model.get("remat_policy", "none"),
            scan=bool(config.model.get("scan", False)), accum_steps=int(config.get("accum_steps", 1)),
            compile_s=compile_s, memory=mem, xla_flops_per_step=xla_flops, analytic=fl, rounds=rounds,
            images_per_s=images_per_s, model_flops_per_s=achieved, matmul_shape=mm_shape,
            matmul_flops_per_s=matmul_rate, ratio=achieved / matmul_rate if matmul_rate else None,
            ratio_cpu=ratio_cpu, peak=peak_name, peak_flops_per_s=peak,
            fraction_of_peak=achieved / peak if peak else None, load_avg=[load0, load1], cpu_count=cores,
            host=platform.node(), jax=jax.__version__)
        with open(_OUT.value, "a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    app.run(main)
