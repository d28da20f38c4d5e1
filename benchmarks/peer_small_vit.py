r"""Our train step against timm's `VisionTransformer` of the same architecture and optimizer, on this CPU.

    python3 -m venv .venv-peer && .venv-peer/bin/pip install -r requirements.txt -r requirements-peer.txt
    .venv-peer/bin/python benchmarks/peer_small_vit.py                                  # all three, ~5 min on 2 cores
    .venv-peer/bin/python benchmarks/peer_small_vit.py --models=grid8 --rounds=5 \
        --out=benchmarks/results/peer_small_vit.jsonl

torch and timm are benchmark-only dependencies (`requirements-peer.txt`, a venv of its own); `vit_jax_struct` and
the tests never import them (`--help` and the model table below work without them).

Models (`--models`, `MODELS`): `grid8`, the model of the grid-8 sweep (`configs/sweeps/cifar10_grid8.py`: Ti/4,
width 64, depth 6, 4 heads, MLP 128, 32-px images, 10 classes, batch 128); `cifar100`, the ViT arms of the CIFAR-100
sweep (`configs/sweeps/cifar100_permuted.py`: `configs/cifar10_vit.py`'s Ti/8, width 128, depth 6, 4 heads, MLP 256,
100 classes, batch 128); `b16`, `configs/vit_b16.py` at 224 px (1000 classes, sigmoid cross-entropy, batch 16).
The sweep models take their config and the `model.*` / `data.num_classes` overrides of the sweep's first run (its
baseline arm, seed 0) from the sweep file itself.

Ours: `trainer.make_train_step` of `trainer.build(config)` through `common.build_synthetic` (data sources replaced by
noise), as `benchmarks/train_step.py` builds it: jitted, the state donated and fed back, one random float32 batch
`[B, S, S, 3]` placed once, XLA's CPU thread pool over all cores. timm: `timm.models.VisionTransformer` with the
config's patch size, width, depth, heads, MLP ratio, classes, classifier (`token`: a class token and
`global_pool='token'`; `gap`: `'avg'`), learned posemb, qkv bias, dropout (`model.dropout` before the blocks and after
the projections, `attention_dropout` on the attention weights) and GELU (flax's `nn.gelu` is the tanh approximation:
timm's `gelu_tanh`), fp32, eager, `torch.set_num_threads(cores)`; its attention is timm's default
(`F.scaled_dot_product_attention`). The same loss (`config.loss`: softmax or per-class sigmoid cross-entropy, label
smoothing), global-norm clipping at `optim.grad_clip_norm`, then `torch.optim.AdamW` with the config's b1, b2, eps and
weight decay (lr-coupled, as optax's) on the weight matrices only (optax's `wd_mask` `/kernel$`: the conv and dense
kernels, not biases, LayerNorm, posemb or CLS), its lr following our schedule step by step; the same random images
(NCHW) and labels. A config that timm's model or this mapping cannot mirror (CNNs, sincos posemb, positional
attention, skip ablations, a pre-logits layer, bf16, SGD, another `wd_mask`) is refused with the reason.

Timing: compile ours; `--warmup` untimed steps of each (default per model); then `--rounds` rounds, each timing
`--steps` steps of ours (dispatch, `block_until_ready`) immediately followed by as many of timm's, in wall-clock and
process-CPU seconds, so both see the same load on a shared machine. Printed per model: the median images/s of each
over the rounds with their min–max, and ours/timm = ratio of the medians with the per-round ratios' min–max (> 1:
ours is faster). Both frameworks live in one process: torch's OpenMP threads may spin briefly after a timm step,
while ours runs; the JSON records the CPU seconds of each side too. `--out=FILE.jsonl` appends one JSON line per
model.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags

from benchmarks import common

# name -> where its config comes from, global batch, timed steps per round and untimed warmup steps (defaults sized
# so all three run in about 5 minutes on 2 cores; a B/16 step takes 20–30 s there, beside another user's load).
MODELS = {
    "grid8": dict(sweep="configs/sweeps/cifar10_grid8.py", batch=128, steps=3, warmup=2),
    "cifar100": dict(sweep="configs/sweeps/cifar100_permuted.py", batch=128, steps=8, warmup=2),
    "b16": dict(config="configs/vit_b16.py", batch=16, steps=1, warmup=1),
}

_MODELS = flags.DEFINE_list("models", list(MODELS), f"Models to run, of {list(MODELS)}.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Timed rounds; each times --steps of ours, then --steps of timm.")
_STEPS = flags.DEFINE_integer("steps", 0, "Timed steps of each per round (0: the model's default in MODELS).")
_WARMUP = flags.DEFINE_integer("warmup", -1, "Untimed steps of each after compilation (-1: the model's default).")
_THREADS = flags.DEFINE_integer("threads", 0, "torch.set_num_threads (0: the number of cores).")
_OUT = flags.DEFINE_string("out", "", "Append one JSON line per model to this file.")


def model_config(name: str):
    """The config of `MODELS[name]` (sweep models: the sweep's config with its first run's `model.*` and
    `data.num_classes` overrides), with the model's batch and the data never read into memory.

    Raises:
      ValueError: an unknown name, naming the known ones.
    """
    if name not in MODELS:
        raise ValueError(f"--models: {name!r} is not one of {list(MODELS)}")
    spec = MODELS[name]
    if "sweep" in spec:
        from launch import sweep

        sw = sweep.load_sweep(os.path.join(common.ROOT, spec["sweep"]))
        run = sw["runs"][0]  # the baseline arm, seed 0
        path, _, arg = run.get("config", sw["config"]).partition(":")
        config = common.load_config(path, arg or None)
        for key, value in {**sw.get("overrides", {}), **run["overrides"]}.items():
            if key.startswith("model.") or key == "data.num_classes":  # not data.root / in_memory: nothing is read
                node, *path_, last = [config, *key.split(".")]
                for p in path_:
                    node = node[p]
                node[last] = value
    else:
        config = common.load_config(spec["config"])
    config.batch_size = spec["batch"]
    config.data.in_memory = False
    return config


def timm_kwargs(config, num_classes: int) -> dict:
    """Keyword arguments of timm's `VisionTransformer` for `config.model` (pure Python: no torch needed).

    Raises:
      ValueError: a model setting timm's ViT (or this mapping) does not mirror, naming it.
    """
    from vit_jax_struct.models import get_model

    m = config.model
    refuse = {"model.name": (m.get("name", "vit"), "vit"), "model.posemb": (m.get("posemb", "learn"), "learn"),
              "model.attention": (m.get("attention", "standard"), "standard"),
              "model.skip_ablation": (m.get("skip_ablation", "") or "", ""),
              "model.add_posemb": (m.get("add_posemb", True), True),
              "model.representation_size": (m.get("representation_size") or 0, 0),
              "model.dtype": (m.get("dtype", "float32"), "float32"),
              "model.classifier": (m.get("classifier", "token") in ("token", "gap"), True)}
    for key, (value, wanted) in refuse.items():
        if value != wanted:
            raise ValueError(f"{key}={m.get(key.split('.', 1)[1])!r}: timm's VisionTransformer has no counterpart "
                             "here (this benchmark mirrors plain fp32 ViTs)")
    a = get_model(m, num_classes).arch()
    ratio = a["mlp_dim"] / a["width"]
    if int(a["width"] * ratio) != a["mlp_dim"]:
        raise ValueError(f"mlp_dim {a['mlp_dim']} is not int(width {a['width']} × mlp_ratio) for any ratio")
    token = m.get("classifier", "token") == "token"
    return dict(img_size=int(config.data.image_size), patch_size=a["patch_size"], embed_dim=a["width"],
                depth=a["depth"], num_heads=a["num_heads"], mlp_ratio=ratio, num_classes=int(num_classes),
                class_token=token, global_pool="token" if token else "avg", qkv_bias=True, drop_rate=0.0,
                pos_drop_rate=float(m.get("dropout", 0.0)), proj_drop_rate=float(m.get("dropout", 0.0)),
                attn_drop_rate=float(m.get("attention_dropout", 0.0)), act_layer="gelu_tanh")


def torch_optim(config) -> dict:
    """AdamW and clipping settings of `config.optim` for `torch.optim.AdamW` (pure Python).

    Raises:
      ValueError: not AdamW, bf16 moments, or a weight-decay mask other than the kernels.
    """
    o = config.optim
    if o.get("name", "adamw") != "adamw":
        raise ValueError(f"optim.name={o.name!r}: only AdamW is mirrored")
    if o.get("mu_dtype") not in ("", None, "float32"):
        raise ValueError(f"optim.mu_dtype={o.mu_dtype!r}: torch's AdamW keeps float32 moments")
    if o.get("wd_mask", r"/kernel$") != r"/kernel$":
        raise ValueError(f"optim.wd_mask={o.wd_mask!r}: only the kernels mask (torch: weight matrices) is mirrored")
    if config.get("accum_steps", 1) != 1 or config.mixup.get("alpha", 0) or config.mixup.get("cutmix_alpha", 0):
        raise ValueError("accum_steps > 1 and mixup/CutMix are not mirrored")
    return dict(betas=(float(o.get("b1", 0.9)), float(o.get("b2", 0.999))), eps=float(o.get("eps", 1e-8)),
                weight_decay=float(o.get("weight_decay", 0.0)), clip=float(o.get("grad_clip_norm", 1.0) or 0.0),
                loss=config.loss, label_smoothing=float(config.get("label_smoothing", 0.0)))


def cpu_model() -> str:
    """'model name' of /proc/cpuinfo (else `platform.processor()`)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _timed(fn, n: int, sync) -> tuple[float, float]:
    """`(wall s, process CPU s)` of `n` calls of `fn`, then `sync` on the last result."""
    t, c = time.perf_counter(), time.process_time()
    out = None
    for _ in range(n):
        out = fn()
    sync(out)
    return time.perf_counter() - t, time.process_time() - c


def ours(config, images, labels) -> dict:
    """Our compiled train step on the batch; returns `step` (a callable), `sync`, `params`, `compile_s`."""
    import jax
    from jax.sharding import NamedSharding

    from vit_jax_struct.train import sharding

    parts = common.build_synthetic(config, jax.devices())
    batch_sh = NamedSharding(parts["mesh"], sharding.BATCH_SPEC)
    batch = {"image": jax.device_put(images, batch_sh), "label": jax.device_put(labels, batch_sh)}
    state = parts["init_state"](jax.random.key(config.seed))
    t = time.perf_counter()
    compiled = parts["train_step"].lower(state, batch).compile()
    compile_s = time.perf_counter() - t
    holder = {"state": state}

    def step():
        holder["state"], m = compiled(holder["state"], batch)
        return holder["state"], m

    params = sum(x.size for x in jax.tree.leaves(state["params"]))
    return dict(step=step, sync=jax.block_until_ready, params=int(params), compile_s=compile_s,
                num_classes=parts["num_classes"], schedule=parts["schedule"])


def timm_side(config, num_classes, images, labels, schedule, n_steps) -> dict:
    """timm's ViT, loss, clipping and AdamW on the same batch (NCHW); `step`, `sync`, `params`, `kwargs`."""
    import numpy as np
    import timm
    import torch
    import torch.nn.functional as F

    kwargs = timm_kwargs(config, num_classes)
    o = torch_optim(config)
    torch.manual_seed(config.seed)
    model = timm.models.VisionTransformer(**kwargs)
    if config.model.get("head_bias_init", 0.0):
        torch.nn.init.constant_(model.head.bias, float(config.model.head_bias_init))
    model.train()
    decay = [p for n, p in model.named_parameters() if n.endswith(".weight") and p.ndim >= 2]
    rest = [p for n, p in model.named_parameters() if not (n.endswith(".weight") and p.ndim >= 2)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}], lr=0.0, betas=o["betas"], eps=o["eps"])
    x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
    y = torch.from_numpy(labels.astype(np.int64))
    lrs = [float(schedule(i)) for i in range(n_steps)]  # ours uses these, step by step
    counter = {"i": 0}

    def loss_fn(logits):
        if o["loss"] == "softmax_xent":
            return F.cross_entropy(logits, y, label_smoothing=o["label_smoothing"])
        targets = F.one_hot(y, num_classes).float()
        if o["label_smoothing"]:
            targets = targets * (1 - o["label_smoothing"]) + o["label_smoothing"] / num_classes
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1).mean()

    def step():
        lr = lrs[min(counter["i"], len(lrs) - 1)]
        counter["i"] += 1
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x))
        loss.backward()
        if o["clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["clip"])
        opt.step()
        return loss

    return dict(step=step, sync=lambda out: out.item(), params=sum(p.numel() for p in model.parameters()),
                kwargs=kwargs, optim=o)


def bench(name: str, rounds: int) -> dict:
    """Builds both sides of model `name`, warms them up and times `rounds` interleaved rounds (see the module doc)."""
    import numpy as np

    spec = MODELS[name]
    steps = _STEPS.value or spec["steps"]
    warmup = spec["warmup"] if _WARMUP.value < 0 else _WARMUP.value
    config = model_config(name)
    b, s = config.batch_size, config.data.image_size
    num_classes = config.data.get("num_classes") or 1000
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (b, s, s, 3)).astype(np.float32)
    labels = rng.integers(0, num_classes, (b,)).astype(np.int32)

    a = ours(config, images, labels)
    t = timm_side(config, a["num_classes"], images, labels, a["schedule"], warmup + rounds * steps)
    warm = {"ours_s": _timed(a["step"], warmup, a["sync"])[0] if warmup else 0.0,
            "timm_s": _timed(t["step"], warmup, t["sync"])[0] if warmup else 0.0}
    per_round = []
    for _ in range(rounds):
        ow, oc = _timed(a["step"], steps, a["sync"])
        tw, tc = _timed(t["step"], steps, t["sync"])
        per_round.append(dict(ours_s=ow, ours_cpu_s=oc, timm_s=tw, timm_cpu_s=tc, ours_img_s=steps * b / ow,
                              timm_img_s=steps * b / tw, ratio=tw / ow))
    med_o = statistics.median(r["ours_img_s"] for r in per_round)
    med_t = statistics.median(r["timm_img_s"] for r in per_round)
    arch = get_arch(config, a["num_classes"])
    return dict(model=name, variant=config.model.variant, arch=arch, image_size=s, batch=b,
                num_classes=a["num_classes"], steps_per_round=steps, rounds=rounds, warmup=warmup,
                ours_params=a["params"], timm_params=t["params"], ours_compile_s=a["compile_s"], warmup_s=warm,
                timm_kwargs=t["kwargs"], optim=t["optim"], per_round=per_round, ours_img_s=med_o, timm_img_s=med_t,
                ratio=med_o / med_t,
                ours_range=[min(r["ours_img_s"] for r in per_round), max(r["ours_img_s"] for r in per_round)],
                timm_range=[min(r["timm_img_s"] for r in per_round), max(r["timm_img_s"] for r in per_round)],
                ratio_range=[min(r["ratio"] for r in per_round), max(r["ratio"] for r in per_round)])


def get_arch(config, num_classes) -> dict:
    from vit_jax_struct.models import get_model

    return get_model(config.model, num_classes).arch()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    names = [n.strip() for n in _MODELS.value if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise app.UsageError(f"--models: {unknown or names} not among {list(MODELS)}")
    if _ROUNDS.value < 1:
        raise app.UsageError(f"--rounds {_ROUNDS.value} must be positive")
    try:
        import timm
        import torch
    except ImportError as e:
        raise app.UsageError(f"{e}: this benchmark needs torch and timm: python3 -m venv .venv-peer && "
                             ".venv-peer/bin/pip install -r requirements.txt -r requirements-peer.txt") from e
    import jax

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = _THREADS.value or cores
    torch.set_num_threads(threads)
    print(f"CPU: {cpu_model()}; {cores} cores; jax {jax.__version__} ({jax.devices()[0].platform}, "
          f"{len(jax.devices())} device(s)); torch {torch.__version__} ({threads} threads), timm {timm.__version__}")
    load0 = os.getloadavg()[0]
    results = []
    for name in names:
        t0 = time.perf_counter()
        r = bench(name, _ROUNDS.value)
        r["total_s"] = time.perf_counter() - t0
        a = r["arch"]
        print(f"{name}: {r['variant']} width {a['width']} depth {a['depth']} heads {a['num_heads']} mlp "
              f"{a['mlp_dim']}, {r['image_size']} px, {r['num_classes']} classes, batch {r['batch']}; params ours "
              f"{r['ours_params']:,} timm {r['timm_params']:,}; ours compiled in {r['ours_compile_s']:.1f} s; "
              f"{r['rounds']} rounds × {r['steps_per_round']} steps each; {r['total_s']:.0f} s in all", flush=True)
        results.append(r)
    load1 = os.getloadavg()[0]

    print()
    def rate(v: float) -> str:  # B/16 on 2 cores is below 1 img/s
        return f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    print(f"{'model':<9} {'batch':>5}  {'ours img/s (min–max)':<26} {'timm img/s (min–max)':<26} ours/timm (min–max)")
    for r in results:
        ours_ = f"{rate(r['ours_img_s'])} ({rate(r['ours_range'][0])}–{rate(r['ours_range'][1])})"
        timm_ = f"{rate(r['timm_img_s'])} ({rate(r['timm_range'][0])}–{rate(r['timm_range'][1])})"
        print(f"{r['model']:<9} {r['batch']:>5}  {ours_:<26} {timm_:<26} {r['ratio']:.2f} "
              f"({r['ratio_range'][0]:.2f}–{r['ratio_range'][1]:.2f})")
    print(f"img/s: median over rounds; ours/timm: ratio of the medians (> 1: ours faster), in brackets the "
          f"per-round ratios. CPU load average (1 min) {load0:.2f} before, {load1:.2f} after, on {cores} cores.")

    if _OUT.value:
        common.append_results(_OUT.value, results, cpu=cpu_model(), cores=cores, torch_threads=threads,
                              jax=jax.__version__, torch=torch.__version__, timm=timm.__version__,
                              host=platform.node(), load_avg=[load0, load1],
                              command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    app.run(main)
