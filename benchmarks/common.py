"""Shared pieces of the benchmark scripts: analytic ViT FLOPs, accelerator peaks and HBM sizes, a data-free
`trainer.build`, and per-device memory figures of a compiled step.

Nothing here imports JAX at module level, so a script can set `XLA_FLAGS` / `JAX_PLATFORMS` (e.g. the fake CPU
device count) after importing this module and before its first JAX import.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # `python benchmarks/x.py` puts benchmarks/ first on the path, not the repository root.
    sys.path.insert(0, ROOT)

GiB = 2**30

# Dense bf16 peak per chip, FLOP/s (no 2:4 sparsity), and devices JAX shows per chip.
#   TPU v3: 123 TFLOP/s per chip, 2 TensorCores = 2 JAX devices  (cloud.google.com/tpu/docs/v3, "Key specifications")
#   TPU v4: 275 TFLOP/s per chip, megacore = 1 JAX device         (cloud.google.com/tpu/docs/v4)
#   TPU v5e: 197 TFLOP/s per chip, 1 TensorCore                   (cloud.google.com/tpu/docs/v5e)
#   TPU v5p: 459 TFLOP/s per chip, megacore = 1 JAX device        (cloud.google.com/tpu/docs/v5p)
#   TPU v6e: 918 TFLOP/s per chip, 1 TensorCore                   (cloud.google.com/tpu/docs/v6e)
#   H100 SXM / H200 SXM: 989 TFLOP/s BF16 Tensor Core dense; NVIDIA's datasheets print 1,979 "with sparsity".
PEAKS = {
    "v3": dict(flops=123e12, devices_per_chip=2, kind="TPU v3"),
    "v4": dict(flops=275e12, devices_per_chip=1, kind="TPU v4"),
    "v5e": dict(flops=197e12, devices_per_chip=1, kind="TPU v5 lite"),
    "v5p": dict(flops=459e12, devices_per_chip=1, kind="TPU v5"),
    "v6e": dict(flops=918e12, devices_per_chip=1, kind="TPU v6 lite"),
    "h100": dict(flops=989e12, devices_per_chip=1, kind="NVIDIA H100"),
    "h200": dict(flops=989e12, devices_per_chip=1, kind="NVIDIA H200"),
}

# HBM per JAX device, bytes (same sources as PEAKS): v3 32 GiB per chip = 16 GiB per TensorCore; v4 32 GiB per chip;
# v5e 16 GiB (its page says "16 GB"; libtpu's compiler allows 15.75 G of it, as it allows 30.75 G of v4's 32 GiB);
# v5p "95 GB", taken as 95e9 bytes (conservative); v6e 32 GiB. The runtime reserves a little of it, so a plan within
# ~5 % of the limit is marginal.
HBM_BYTES = {"v3": 16 * GiB, "v4": 32 * GiB, "v5e": 16 * GiB, "v5p": 95e9, "v6e": 32 * GiB, "h100": 80e9,
             "h200": 141e9}


def vit_flops(arch: dict, image_size: int, num_classes: int = 0, classifier: str = "token",
              representation_size: int | None = None) -> dict:
    """Analytic multiply-accumulates (MACs) and FLOPs of one image through a ViT (matmuls only).

    Per encoder block with N tokens (CLS included), width D and MLP width M: q, k, v and out projections 4·N·D², the
    two attention products QKᵀ and AV 2·N²·D, the MLP 2·N·D·M (= 12·N·D² + 2·N²·D for M = 4D). Plus the patch
    embedding n·P²·3·D (n patches of P×P pixels), the optional pre-logits layer D·R and the head D·classes (R·classes
    with a representation layer). LayerNorm, softmax, GELU and biases are left out (< 1 % for B/16).

    Training = forward + backward, where the backward pass costs two forward matmuls (gradients with respect to the
    inputs and the weights) except for the patch embedding, whose input (the image) needs no gradient: 3·forward
    − embedding MACs. Rematerialisation recomputes (part of) the forward pass on top of this; these "model FLOPs"
    leave that out, so they compare across remat policies (MFU, Chowdhery et al. 2022 App. B).

    Args:
      arch: `width`, `depth`, `mlp_dim`, `patch_size` (as `VisionTransformer.arch()` returns).
      image_size: square image side, pixels.
      num_classes: head size (0: no head).
      classifier: "token" (a CLS token: N = n + 1) or "gap" (N = n).
      representation_size: pre-logits width (None/0: none).

    Returns:
      dict of MACs per image: `embed`, `block` (one encoder block), `encoder` (all blocks), `head` (pre-logits +
      head), `forward`, `train`; and `forward_flops`, `train_flops` (2 FLOPs per MAC) per image; `tokens` N.
    """
    d, depth, mlp, p = arch["width"], arch["depth"], arch["mlp_dim"], arch["patch_size"]
    n = (image_size // p) ** 2
    tokens = n + (1 if classifier == "token" else 0)
    embed = n * p * p * 3 * d
    block = 4 * tokens * d * d + 2 * tokens * tokens * d + 2 * tokens * d * mlp
    rep = representation_size or 0
    head = (d * rep if rep else 0) + (rep or d) * (num_classes or 0)
    forward = embed + depth * block + head
    train = 3 * forward - embed
    return dict(tokens=tokens, embed=embed, block=block, encoder=depth * block, head=head, forward=forward,
                train=train, forward_flops=2 * forward, train_flops=2 * train)


def config_flops(config, num_classes: int) -> dict:
    """`vit_flops` of a config's ViT at `config.data.image_size` (see `vit_flops`).

    Raises:
      ValueError: the config's model is not a ViT.
    """
    from vit_jax_struct.models import get_model

    if config.model.get("name", "vit") != "vit":
        raise ValueError(f"analytic FLOPs are for ViTs; model.name is {config.model.name!r}")
    model = get_model(config.model, num_classes)
    return vit_flops(model.arch(), config.data.image_size, num_classes, model.classifier,
                     model.representation_size)


class SyntheticSource:
    """Stands in for a data source when nothing is read: `num_classes` classes, `size` examples of noise.

    `__getitem__` returns `{"image": uint8 [S, S, 3], "label": int}` (never called by the benchmarks, which feed
    device arrays directly).
    """

    def __init__(self, num_classes: int, image_size: int, size: int = 1_000_000):
        self.num_classes, self.image_size, self.size = int(num_classes), int(image_size), int(size)
        self.class_names = [str(i) for i in range(self.num_classes)]

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        import numpy as np

        rng = np.random.default_rng(int(i))
        return {"image": rng.integers(0, 256, (self.image_size, self.image_size, 3), dtype=np.uint8),
                "label": int(rng.integers(self.num_classes))}


@contextlib.contextmanager
def synthetic_data(num_classes: int, image_size: int):
    """Within the block `trainer.build` uses `SyntheticSource`s instead of the config's data sources.

    So the benchmarks run the real `build` (mesh, batch checks, model, optimizer, shardings) without ImageNet on
    disk; `num_classes` sets the head size (the config's `data.num_classes`).
    """
    from vit_jax_struct.train import trainer

    original = trainer.sources.get_source
    trainer.sources.get_source = lambda data_config, split, class_names=None, lazy=False, **_: SyntheticSource(
        num_classes, image_size)
    try:
        yield
    finally:
        trainer.sources.get_source = original


def build_synthetic(config, devices=None) -> dict:
    """`trainer.build(config, devices)` with synthetic sources of `config.data.num_classes` classes (1000 if 0).

    `config.data.in_memory` is set False (in place): the step is fed device arrays, so holding the synthetic
    source in memory would only cost start-up time; no train augmentation runs in the timed step.

    Returns `build`'s dict plus `state_sharding` (the train state's `NamedSharding`s) and `train_step`
    (`trainer.make_train_step`, jitted, not yet compiled).
    """
    import jax

    from vit_jax_struct.train import trainer

    jax.config.update("jax_threefry_partitionable", True)  # As train_and_evaluate does.
    num_classes = config.data.get("num_classes") or 1000
    if config.data.get("in_memory"):  # the benchmarks feed device arrays: nothing to decode into memory
        config.data.in_memory = False
    with synthetic_data(num_classes, config.data.image_size):
        parts = trainer.build(config, devices)
    parts["state_sharding"] = jax.tree.map(lambda s: s.sharding, parts["abstract_state"])
    parts["train_step"] = trainer.make_train_step(config, parts["model"], parts["tx"], parts["schedule"],
                                                  parts["num_classes"], parts["mesh"], parts["state_sharding"])
    return parts


def abstract_batch(config, mesh) -> dict:
    """`ShapeDtypeStruct`s of one global batch with the batch sharding: image float32 `[B, S, S, 3]`, label int32
    `[B]` (B = `config.batch_size`)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    from vit_jax_struct.train import sharding

    sh = NamedSharding(mesh, sharding.BATCH_SPEC)
    b, s = config.batch_size, config.data.image_size
    return {"image": jax.ShapeDtypeStruct((b, s, s, 3), jnp.float32, sharding=sh),
            "label": jax.ShapeDtypeStruct((b,), jnp.int32, sharding=sh)}


def memory_stats(compiled) -> dict | None:
    """Per-device bytes of a compiled executable from `compiled.memory_analysis()` (None if the backend has none).

    Keys (bytes, per device): `arguments`, `outputs`, `aliased` (outputs that reuse donated argument buffers),
    `temporaries` (activations and other scratch live during the step), `generated_code`, and `total` =
    arguments + outputs − aliased + temporaries + generated code, the peak a device must hold.
    """
    try:
        m = compiled.memory_analysis()
    except Exception:  # Some backends raise NotImplemented / Unimplemented.
        return None
    if m is None:
        return None
    if isinstance(m, (list, tuple)):
        m = m[0]
    out = dict(arguments=int(m.argument_size_in_bytes), outputs=int(m.output_size_in_bytes),
               aliased=int(m.alias_size_in_bytes), temporaries=int(m.temp_size_in_bytes),
               generated_code=int(m.generated_code_size_in_bytes))
    out["total"] = (out["arguments"] + out["outputs"] - out["aliased"] + out["temporaries"]
                    + out["generated_code"])
    return out


def cost_flops(compiled) -> float | None:
    """XLA's own FLOP count of a compiled executable (`cost_analysis()["flops"]`, per device program), or None."""
    try:
        c = compiled.cost_analysis()
    except Exception:
        return None
    if isinstance(c, (list, tuple)):
        c = c[0] if c else None
    if not c or "flops" not in c:
        return None
    return float(c["flops"])


def format_bytes(n: float | None) -> str:
    """Bytes as GiB with 2 decimals ("–" for None)."""
    return "–" if n is None else f"{n / GiB:.2f} GiB"


def load_config(path: str, arg=None):
    """`get_config(arg)` of a config file given relative to the repository root (e.g. `configs/vit_b16.py`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cfg", os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def append_results(path: str, rows: list[dict], **extra) -> None:
    """Appends `rows` to the JSON-lines file `path` (created with its folder), each with `extra` and the time."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps({**r, **extra, "time": time.strftime("%Y-%m-%d %H:%M")}) + "\n")


def config_arg_string(flag_name: str = "config") -> str:
    """The `--config=file.py[:arg]` value as given on the command line (for logs and JSON records)."""
    from absl import flags

    return flags.FLAGS[flag_name].serialize().split("=", 1)[-1]


def config_overrides(argv: list[str] | None = None) -> list[str]:
    """The `--config.key=value` flags of a command line, in order (what a JSON record needs to rerun it)."""
    return [a for a in (sys.argv if argv is None else argv) if a.startswith("--config.")]


_TOPOLOGY_RE = re.compile(r"^(v\d+[a-z]*|v5litepod):(\d+(?:x\d+)*)$")


def parse_topology(name: str) -> dict:
    """`"v4:2x2x1"` -> `{name, version, chips, devices, kwargs}` (`kwargs` for `get_topology_desc`).

    `devices` is what JAX shows: chips × devices per chip (2 for v3, else 1: v4 and v5p are compiled as megacore).

    Raises:
      ValueError: a name not of the form `<version>:<AxB[xC]>` or an unknown version, naming the allowed ones.
    """
    m = _TOPOLOGY_RE.match(name.strip())
    if not m:
        raise ValueError(f"--topology {name!r} is not '<version>:<chips per axis>', e.g. 'v4:2x2x1', 'v5e:2x2', "
                         "'v5p:2x2x1'")
    version = "v5e" if m.group(1) == "v5litepod" else m.group(1)
    if version not in PEAKS or version.startswith("h"):
        raise ValueError(f"--topology {name!r}: version {version!r} is not one of v3, v4, v5e, v5p, v6e")
    chips = math.prod(int(d) for d in m.group(2).split("x"))
    kwargs = {"chip_config_name": "megacore"} if version == "v4" else {}  # libtpu's default for v4 is per core.
    return dict(name=f"{version}:{m.group(2)}", version=version, chips=chips,
                devices=chips * PEAKS[version]["devices_per_chip"], kwargs=kwargs)


def topology_devices(topology: dict, backend: str) -> list:
    """Compile-only TPU devices of the slice (backend 'tpu') or the fake CPU devices (backend 'cpu')."""
    import jax

    if backend == "cpu":
        devices = jax.devices("cpu")
        if len(devices) < topology["devices"]:
            raise RuntimeError(f"{len(devices)} CPU devices; {topology['name']} needs {topology['devices']} (set "
                               "XLA_FLAGS=--xla_force_host_platform_device_count before JAX starts)")
        return devices[:topology["devices"]]
    try:
        import libtpu  # noqa: F401
    except ImportError as e:
        raise RuntimeError("--backend=tpu needs libtpu: pip install -r requirements-tpu.txt (or --backend=cpu)") from e
    from jax.experimental import topologies

    # libtpu takes /tmp/libtpu_lockfile when it loads; compile-only use may share it with another JAX process.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    desc = topologies.get_topology_desc(topology_name=topology["name"], platform="tpu", **topology["kwargs"])
    return list(desc.devices)


def plan(config, topology: dict, backend: str = "tpu") -> dict:
    """Compiles the train step of `config` for the slice and returns its per-device memory (see the module doc).

    Returns:
      dict with `devices`, `mesh` (axis sizes), `per_device_batch`, `compile_s` (build + lower + compile, seconds;
      `seconds` splits it), `oom` (None, or the TPU compiler's out-of-memory refusal: `message`, `temporaries` and
      `available` bytes; `memory` is then None and `fits` False),
      `memory` (`memory_stats`, bytes per device), `hbm` (bytes per device), `fits` (total ≤ HBM),
      `xla_flops` (per device and step).
    """
    devices = topology_devices(topology, backend)
    t0 = time.perf_counter()
    parts = build_synthetic(config, devices)
    batch = abstract_batch(config, parts["mesh"])
    t1 = time.perf_counter()
    lowered = parts["train_step"].lower(parts["abstract_state"], batch)
    t2 = time.perf_counter()
    n = parts["mesh"].devices.size
    out = dict(devices=n, device_kind=devices[0].device_kind, mesh=dict(parts["mesh"].shape),
               per_device_batch=config.batch_size // n, hbm=HBM_BYTES[topology["version"]], oom=None)
    try:
        compiled = lowered.compile()
    except Exception as e:  # The TPU compiler refuses a program whose temporaries exceed HBM.
        oom = _parse_oom(str(e))
        if oom is None:
            raise
        t3 = time.perf_counter()
        return dict(out, compile_s=t3 - t0, seconds=dict(build=t1 - t0, lower=t2 - t1, compile=t3 - t2),
                    memory=None, fits=False, oom=oom, xla_flops=None)
    t3 = time.perf_counter()
    mem = memory_stats(compiled)
    return dict(out, compile_s=t3 - t0, seconds=dict(build=t1 - t0, lower=t2 - t1, compile=t3 - t2), memory=mem,
                fits=None if mem is None else mem["total"] <= out["hbm"], xla_flops=cost_flops(compiled))


_OOM_RE = re.compile(r"RESOURCE_EXHAUSTED: Ran out of memory.*?temporaries \(([\d.]+)([KMGT])\) exceeds available "
                     r"HBM \(([\d.]+)([KMGT])\)")


def _parse_oom(message: str) -> dict | None:
    """The TPU compiler's out-of-memory error -> `{message, temporaries, available}` (bytes; its "G" is GiB), or
    None for any other error."""
    m = _OOM_RE.search(message)
    if not m:
        return None
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    line = next(x for x in message.splitlines() if "RESOURCE_EXHAUSTED" in x)
    return dict(message=line.strip(), temporaries=float(m.group(1)) * scale[m.group(2)],
                available=float(m.group(3)) * scale[m.group(4)])


def render(path: str) -> str:
    """The records of a `--out` JSONL file as a markdown table (one row per record, in file order)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    head = ("| model | slice (chips) | backend | mesh data×fsdp | batch / device (micro) | remat | dtype | Adam μ "
            "| state + batch | temporaries | total / HBM per device | fits | compile | command |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        mem = r.get("memory") or {}
        version = r["topology"].split(":")[0]
        if version in HBM_BYTES and mem:  # Judge every row by the current HBM table.
            r["hbm"] = HBM_BYTES[version]
            r["fits"] = mem["total"] <= r["hbm"]
        micro = r["per_device_batch"] // r["accum_steps"]
        batch = f"{r['per_device_batch']}" + (f" ({micro} × {r['accum_steps']})" if r["accum_steps"] > 1 else "")
        fits = {True: "yes", False: "**no**", None: "?"}[r.get("fits")]
        if r.get("fits") and mem["total"] > 0.95 * r["hbm"]:  # The runtime keeps a little HBM for itself.
            fits = f"marginal ({100 * mem['total'] / r['hbm']:.0f} %)"
        total = f"{mem['total'] / GiB:.1f} / {r['hbm'] / GiB:.1f} GiB" if mem else "–"
        temps = f"{mem.get('temporaries', 0) / GiB:.2f} GiB" if mem else "–"
        state = f"{mem.get('arguments', 0) / GiB:.2f} GiB" if mem else "–"
        if r.get("oom"):  # The compiler refused: it states the temporaries it needed and the HBM it had.
            temps = f"{r['oom']['temporaries'] / GiB:.2f} GiB (compiler OOM)"
            total = f"> {r['oom']['available'] / GiB:.2f} GiB available"
        remat = r["remat_policy"] + (" + scan" if r.get("scan") else "")
        out.append(
            f"| {r['variant']} | {r['topology']} ({r['chips']}) | {r['backend']} | {r['mesh']['data']}×"
            f"{r['mesh']['fsdp']} | {batch} | {remat} | {r['dtype']} | {r['mu_dtype']} | "
            f"{state} | {temps} | {total} | {fits} | {r['compile_s']:.0f} s | `{r['command']}` |")
    return "\n".join(out)
