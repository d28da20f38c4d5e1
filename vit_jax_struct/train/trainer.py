"""The training loop: `train_and_evaluate(config, workdir)`.

jit + NamedSharding on a `('data', 'fsdp')` mesh (no pmap): the batch is sharded over every device, parameters
and optimizer state by `config.param_sharding` rules, the state is donated. Randomness comes from one root key,
`jax.random.key(config.seed)`: parameters from `fold_in(root, 0)`, dropout at step s from
`fold_in(fold_in(root, 1), s)`, data order and augmentation from grain seeded with `config.seed`. The RNG is therefore
a function of `(seed, step)` and needs no checkpointing; the step, parameters, optimizer state and the data
iterator's position are checkpointed, so a resumed run repeats the uninterrupted one bitwise (on CPU).

Everything that can fail on bad input (mesh, batch split, data folders, model, preprocessing, optimizer, a
checkpoint that does not match the model) is checked before anything is written to the workdir.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import shutil
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vit_jax_struct import storage
from vit_jax_struct.data import device_input, mixup, permute, pipeline, preprocess, sources
from vit_jax_struct.models import get_model, official
from vit_jax_struct.train import checkpoint, curves, fewshot_eval, lock, optim, sharding, timing, validate
from vit_jax_struct.train import metrics as metrics_lib
from vit_jax_struct.train import runlog as runlog_lib


class _StopSignals:
    """SIGTERM (pre-emption) and a first SIGINT (Ctrl-C) set a flag; the loop checkpoints at the next step and stops
    (single process). A second SIGINT stops at once (KeyboardInterrupt; the checkpoint of the first may be missing).

    With several processes the hosts agree on SIGTERM through JAX's preemption sync point instead
    (`multihost_utils.reached_preemption_sync_point`), which the coordination service drives; Ctrl-C there keeps
    Python's default (KeyboardInterrupt on the host that got it).
    """

    def __init__(self):
        self.signum = None
        self.previous = {}
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.previous[sig] = signal.signal(sig, self._handler)

    def _handler(self, signum, frame):
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT (Ctrl-C; press again to stop at once)"
        logging.warning("received %s: saving a checkpoint after this step, then exiting", name)
        self.signum = signum

    def reached(self, step: int) -> bool:
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            if multihost_utils.reached_preemption_sync_point(step):
                self.signum = signal.SIGTERM
        return self.signum is not None

    def close(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}


def _format_eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def build(config, devices=None):
    """Builds (and validates) everything a run needs, writing nothing.

    Returns a dict with `mesh`, `model`, `train_source` (the nested subset when `data.train_fraction` or
    `data.train_examples` is set), `eval_source`, `train_pp`, `eval_pp` (wrapped in the patch permutation when
    `data.permute_patches`), `tx`, `schedule`, `per_host_batch`, `eval_per_host_batch`, `abstract_state`
    (`ShapeDtypeStruct`s with shardings), `init_state` (a jitted function of the init key), `num_classes`,
    `total_steps` (scaled by the subset size when `data.scale_steps_with_data`), `permutation` (or None),
    `full_train_examples` (the train split's size before any subset), `class_names` (the train source's, label
    order; None if it has none), `device_input` (True: train batches are gathered by index and augmented in the
    step, `data/device_input.py`) and `no_device_input` (why not, or None).

    Raises:
      ValueError / FileNotFoundError: with the offending config value and what is allowed.
    """
    validate.validate(config)
    mesh = sharding.create_mesh(config.mesh, devices)
    per_host = sharding.check_batch_size(config.batch_size, mesh)
    check_accum_steps(config.get("accum_steps", 1), config.batch_size, mesh)
    eval_per_host = sharding.check_batch_size(config.get("eval_batch_size") or config.batch_size, mesh,
                                              "config.eval_batch_size")
    if config.total_steps <= 0:
        raise ValueError(f"config.total_steps {config.total_steps} must be positive")
    data = config.data
    # Folder JPEGs reach TrainPreprocess undecoded, so it can decode them at reduced size (pp.jpeg_draft); under
    # decode_errors='skip' they are decoded in the source, where SkipUnreadable catches a bad file.
    in_memory = bool(data.get("in_memory", False))
    lazy = (config.pp.get("jpeg_draft", True) and config.pp.get("train_crop", "inception") == "inception"
            and data.get("decode_errors", "raise") == "raise" and not in_memory)
    decoder = config.pp.get("jpeg_decoder", "pillow")
    full_train = sources.get_source(data, data.train_split, lazy=lazy, jpeg_decoder=decoder)
    train_source = sources.nested_subset(full_train, data.get("train_fraction", 0.0), data.get("train_examples", 0),
                                         data.get("subset_seed", 0))
    total_steps = config.total_steps
    if data.get("scale_steps_with_data") and len(train_source) < len(full_train):
        total_steps = max(1, round(total_steps * len(train_source) / len(full_train)))
    eval_source = sources.evenly_spaced(
        sources.get_source(data, data.eval_split, getattr(full_train, "class_names", None), jpeg_decoder=decoder),
        data.get("eval_examples", 0))
    if data.get("decode_errors", "raise") == "skip":
        train_source, eval_source = sources.SkipUnreadable(train_source), sources.SkipUnreadable(eval_source)
    if in_memory:  # decoded once here; the batches are those the files would give (sources.InMemorySource)
        threads = max(2, int(data.get("num_threads", 2)))
        train_source = sources.InMemorySource(train_source, threads)
        eval_source = sources.InMemorySource(eval_source, threads)
        logging.info("data.in_memory: %s train + %s eval images decoded into %.1f MiB in %.1f s",
                     f"{len(train_source):,}", f"{len(eval_source):,}",
                     (train_source.images.nbytes + eval_source.images.nbytes) / 2**20,
                     train_source.load_seconds + eval_source.load_seconds)
    num_classes = train_source.num_classes
    if data.get("num_classes") and data.num_classes != num_classes:
        raise ValueError(f"config.data.num_classes {data.num_classes} differs from the {num_classes} classes "
                         f"found in the {data.source!r} train split")
    parts = build_model(config, num_classes, total_steps, mesh)
    no_device_input = device_input.unsupported_reason(config, train_source)
    return dict(**parts, mesh=mesh, train_source=train_source, eval_source=eval_source, per_host_batch=per_host,
                eval_per_host_batch=eval_per_host, num_classes=num_classes, total_steps=total_steps,
                full_train_examples=len(full_train), device_input=no_device_input is None,
                no_device_input=no_device_input, class_names=getattr(full_train, "class_names", None))


def build_model(config, num_classes: int, total_steps: int, mesh) -> dict:
    """The model half of `build`, reading no data: `model`, `train_pp`, `eval_pp` (wrapped in the patch permutation
    when `data.permute_patches`), `permutation` (or None), `tx`, `schedule`, `abstract_state` (`ShapeDtypeStruct`s
    with shardings on `mesh`), `init_state` (jitted, of the init key) and `value_range` (`preprocess.input_scaling`: `pp.value_range` or `pp.normalize`).

    Raises:
      ValueError: a bad model, preprocessing, mixup, permutation, optimizer or loss value, naming it.
    """
    data = config.data
    model = get_model(config.model, num_classes)
    train_pp, eval_pp = preprocess.from_config(config.pp, data.image_size)  # uint8 out: scaled on the device
    mixup.check_config(config.get("mixup"))
    perm = None
    if data.get("permute_patches"):
        patch = data.get("permutation_patch_size") or getattr(model, "arch", lambda: {})().get("patch_size")
        if not patch:
            raise ValueError("data.permute_patches needs data.permutation_patch_size for a model without patches "
                             f"(model.name {config.model.get('name')!r})")
        if data.image_size % patch:
            raise ValueError(f"data.image_size {data.image_size} is not divisible by the permutation patch size "
                             f"{patch}")
        perm = permute.patch_permutation((data.image_size // patch) ** 2, data.get("permutation_seed", 0))
        perm = {"perm": perm, "patch": int(patch), "seed": data.get("permutation_seed", 0)}
        train_pp = permute.PermutePatches(train_pp, perm["perm"], patch)
        eval_pp = permute.PermutePatches(eval_pp, perm["perm"], patch)
    tx, schedule = optim.make_optimizer(config.optim, total_steps)
    jax.eval_shape(lambda logits, labels: optim.classification_loss(logits, labels, num_classes, config.loss),
                   jax.ShapeDtypeStruct((1, num_classes), jnp.float32),
                   jax.ShapeDtypeStruct((1,), jnp.int32))  # Fails now on an unknown loss (traced, not compiled).
    dummy = jnp.zeros((1, data.image_size, data.image_size, 3), jnp.float32)

    def init_state(key):
        variables = dict(model.init(key, dummy))
        params = variables.pop("params")
        state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}
        if variables:  # e.g. BatchNorm's batch_stats
            state["model_state"] = variables
        return state

    shapes = jax.eval_shape(init_state, jax.random.key(0))  # Raises here on a bad image/patch size.
    state_sh = sharding.shardings(shapes, config.get("param_sharding", ((".*", "fsdp"),)), mesh)
    abstract_state = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                                  shapes, state_sh)
    return dict(model=model, train_pp=train_pp, eval_pp=eval_pp, permutation=perm, tx=tx, schedule=schedule,
                abstract_state=abstract_state, init_state=jax.jit(init_state, out_shardings=state_sh),
                value_range=preprocess.input_scaling(config.pp))


def make_train_iterator(config, parts):
    """The host-local train batch iterator of a run: `device_input.InMemoryBatches` (uint8 images gathered by index,
    augmented in the step) when `parts["device_input"]`, else grain's `pipeline.train_iterator` (every transform per
    example on the host; worker processes start at the first `next`, after the restore)."""
    if parts["device_input"]:
        images, labels = device_input.host_arrays(parts["train_source"], config.data.image_size,
                                                  config.pp.get("train_crop", "inception"))
        return device_input.InMemoryBatches(images, labels, config.batch_size, config.seed, jax.process_index(),
                                            jax.process_count())
    return pipeline.train_iterator(
        parts["train_source"], parts["train_pp"], parts["per_host_batch"], seed=config.seed,
        process_index=jax.process_index(), process_count=jax.process_count(),
        num_threads=config.data.get("num_threads", 2), prefetch=config.data.get("prefetch", 256),
        worker_count=config.data.get("worker_count", 0))


def make_augment(config, parts):
    """The in-step train augmentation of a run with `parts["device_input"]` (`device_input.make_augment`), else
    None."""
    if not parts["device_input"]:
        return None
    perm = parts["permutation"]
    return device_input.make_augment(config, config.data.image_size, perm and perm["perm"], perm and perm["patch"])


def check_accum_steps(accum_steps: int, batch_size: int, mesh) -> None:
    """Gradient accumulation needs every device's share of the batch to split into `accum_steps` micro-batches.

    Raises:
      ValueError: `accum_steps` < 1, or `batch_size` not divisible by `accum_steps` × devices (naming all three).
    """
    n = mesh.devices.size
    if int(accum_steps) != accum_steps or accum_steps < 1:
        raise ValueError(f"config.accum_steps {accum_steps} must be a positive integer")
    if batch_size % (accum_steps * n):
        raise ValueError(f"config.batch_size {batch_size} is not divisible by accum_steps {accum_steps} x "
                         f"{n} devices: every micro-batch must split evenly over the devices")


def micro_batches(batch: dict, accum_steps: int, mesh) -> dict:
    """`[B, ...]` -> `[accum_steps, B / accum_steps, ...]` with every micro-batch spread over all devices.

    Example b of micro-batch i is global example `b * accum_steps + i`: the split is along the device-local part
    of the batch, so no data moves between devices and each micro-batch keeps the batch sharding.
    """
    spec = P(None, *sharding.BATCH_SPEC)

    def split(x):
        x = x.reshape(x.shape[0] // accum_steps, accum_steps, *x.shape[1:])
        return jax.lax.with_sharding_constraint(jnp.swapaxes(x, 0, 1), NamedSharding(mesh, spec))

    return jax.tree.map(split, batch)


def make_train_step(config, model, tx, schedule, num_classes, mesh, state_sharding, augment=None):
    """Jitted `(state, batch) -> (state, metrics)`; the state is donated.

    `augment`: `(uint8 images, step) -> uint8 images`, the random train transform run in the step on batches the
    host gathered unaugmented (`make_augment`, `data/device_input.py`); None: the batch arrives augmented.

    `batch`: `{"image": uint8 (or float32) [B, S, S, 3], "label": int32 [B]}` sharded over all devices; uint8
    images are scaled to `pp.value_range` here, then mixed by `config.mixup` (`data/mixup.py`). `metrics` (replicated
    scalars): `loss` (mean over the batch), `grad_norm`, `lr` (the rate used for this update), `nonfinite` (1 if the
    loss is NaN/inf).

    Gradient accumulation (`config.accum_steps` = k > 1): the batch is split into k micro-batches of B/k
    (`micro_batches`) and a `lax.scan` sums their gradients of the mean micro-batch loss; the update uses the mean
    over micro-batches, which equals the full-batch gradient of the mean loss (up to float rounding) — activation
    memory is that of B/k examples. Dropout keys are folded with the micro-batch index; BatchNorm statistics are
    those of the last micro-batch (models with batch_stats see B/k examples per normalisation).
    """
    dropout_root = jax.random.fold_in(jax.random.key(config.seed), 1)
    batch_transform = mixup.make_batch_transform(config, num_classes)  # value_range, mixup: key fold_in(root, 2)
    accum = int(config.get("accum_steps", 1))
    # Gradients take the parameters' sharding (reduce-scatter under FSDP, not a replicated all-reduce), also the
    # accumulator carried through the micro-batch scan.
    shard_like_params = functools.partial(jax.lax.with_sharding_constraint, shardings=state_sharding["params"]) \
        if mesh.devices.size > 1 else (lambda tree: tree)

    @sharding.activation_sharding(mesh)
    def step_fn(state, batch):
        step = state["step"]
        rng = jax.random.fold_in(dropout_root, step)
        if augment is not None:
            batch = {**batch, "image": augment(batch["image"], step)}
        batch = batch_transform(batch, step)

        model_state = state.get("model_state", {})

        def loss_fn(params, model_state, batch, rng):
            (logits, _), new_model_state = model.apply(
                {"params": params, **model_state}, batch["image"], train=True, rngs={"dropout": rng},
                mutable=list(model_state))
            loss = optim.classification_loss(logits, batch["label"], num_classes, config.loss,
                                             config.get("label_smoothing", 0.0))
            return loss.mean(), new_model_state

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        if accum == 1:
            (loss, new_model_state), grads = grad_fn(state["params"], model_state, batch, rng)
            grads = shard_like_params(grads)
        else:
            def micro(carry, xs):
                loss_sum, grad_sum, mstate = carry
                i, mb = xs
                (loss, mstate), grads = grad_fn(state["params"], mstate, mb, jax.random.fold_in(rng, i))
                grad_sum = shard_like_params(jax.tree.map(jnp.add, grad_sum, shard_like_params(grads)))
                return (loss_sum + loss, grad_sum, mstate), None

            zeros = shard_like_params(jax.tree.map(jnp.zeros_like, state["params"]))
            (loss, grads, new_model_state), _ = jax.lax.scan(
                micro, (jnp.zeros((), jnp.float32), zeros, model_state),
                (jnp.arange(accum), micro_batches(batch, accum, mesh)))
            loss, grads = loss / accum, jax.tree.map(lambda g: g / accum, grads)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        new_state = {"step": step + 1, "params": params, "opt_state": opt_state}
        if model_state:
            new_state["model_state"] = dict(new_model_state)
        m = {"loss": loss, "grad_norm": optax.global_norm(grads), "lr": schedule(step),
             "nonfinite": (~jnp.isfinite(loss)).astype(jnp.int32)}
        return new_state, m

    repl = NamedSharding(mesh, P())
    batch_sh = NamedSharding(mesh, sharding.BATCH_SPEC)
    return jax.jit(step_fn, in_shardings=(state_sharding, batch_sh), out_shardings=(state_sharding, repl),
                   donate_argnums=0)


def model_variables(state) -> dict:
    """The flax variables of a train state: `{"params": …}` plus its model state (e.g. `batch_stats`)."""
    return {"params": state["params"], **state.get("model_state", {})}


def make_eval_step(config, model, num_classes, mesh, variables_sharding):
    """Jitted `(variables, batch with "mask") -> {"correct", "loss", "count"}` sums over the real examples."""

    @sharding.activation_sharding(mesh)
    def eval_fn(variables, batch):
        images = preprocess.to_value_range(batch["image"], preprocess.input_scaling(config.pp), jnp)
        logits, _ = model.apply(variables, images, train=False)
        loss = optim.classification_loss(logits, batch["label"], num_classes, config.loss)
        correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
        w = batch["mask"]
        return {"correct": (correct * w).sum(), "loss": (loss * w).sum(), "count": w.sum()}

    batch_sh = NamedSharding(mesh, sharding.BATCH_SPEC)
    return jax.jit(eval_fn, in_shardings=(variables_sharding, batch_sh), out_shardings=NamedSharding(mesh, P()))


def evaluate(eval_step, variables, parts, mesh) -> dict:
    """Top-1 accuracy and mean loss over the whole eval split: `{"eval/accuracy", "eval/loss"}`."""
    if "eval_batches" not in parts:  # decoded and preprocessed once, reused by every evaluation when it fits
        parts["eval_batches"] = pipeline.CachedEvalBatches(parts["eval_source"], parts["eval_pp"],
                                                           parts["eval_per_host_batch"], jax.process_index(),
                                                           jax.process_count())
    total, wait = None, sharding.one_program_in_flight(mesh)
    for batch in parts["eval_batches"]:
        out = eval_step(variables, sharding.global_batch(batch, mesh))
        if wait:
            jax.block_until_ready(out)
        total = out if total is None else jax.tree.map(jnp.add, total, out)
    total = jax.device_get(total)
    return {"eval/accuracy": total["correct"] / total["count"], "eval/loss": total["loss"] / total["count"]}


CLASS_NAMES = "class_names.json"  # in the workdir: the class names in label order (a JSON list of strings)


def _write_config(config, workdir: str, step: int) -> None:
    """Writes the resolved config to `workdir/config.json`; a different earlier one is kept as config.step<N>.json."""
    path = storage.join(workdir, "config.json")
    text = config.to_json_best_effort(indent=2, sort_keys=True)
    if storage.exists(path):
        old = storage.read_text(path)
        if old == text:
            return
        logging.warning("config differs from %s; keeping the old one as config.step%d.json", path, step)
        storage.write_text(storage.join(workdir, f"config.step{step}.json"), old)
    storage.write_text(path, text)


class Preempted(Exception):
    """The run stopped on SIGTERM (pre-emption) after checkpointing `step`; rerunning the command resumes it.

    `main.py` exits with `EXIT_CODE` (143 = 128 + SIGTERM, the shell's convention), so schedulers (Kubernetes,
    JobSet, SLURM, a shell loop) do not mark a pre-empted run complete.
    """

    EXIT_CODE = 143
    WHAT = "pre-empted"

    def __init__(self, step: int, total: int, directory: str, saved: bool = True):
        super().__init__(f"{self.WHAT}: saved checkpoint at step {step} of {total} in {directory}; rerun the same "
                         "command to resume" if saved else
                         f"{self.WHAT} at step {step} of {total}; no checkpoint written (config.save_checkpoints="
                         "False), so a rerun starts over")
        self.step, self.total = step, total


class Interrupted(Preempted):
    """The run stopped on Ctrl-C (SIGINT) after checkpointing `step`; `main.py` exits 130 (128 + SIGINT)."""

    EXIT_CODE = 130
    WHAT = "interrupted"


class RunError(RuntimeError):
    """A failure after the run began writing its workdir that would otherwise read as a usage error (e.g. an image
    found unreadable mid-run): `main.py` exits 1, not 2. The message is the original's type and first line."""


def device_description() -> str:
    """What the run trained on, for `final_metrics.json` and runs.csv: `"<platform>: <kind> × <count>"`, on a CPU with
    its model name and the cores this process may use (e.g. `"cpu: Intel(R) Xeon(R) Processor, 2 cores × 1"`)."""
    d, n = jax.devices()[0], jax.device_count()
    kind = d.device_kind
    if d.platform == "cpu":
        try:
            with open("/proc/cpuinfo") as f:
                kind = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        except (OSError, StopIteration):
            pass
        kind = f"{kind}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores"
    return f"{d.platform}: {kind} × {n}"


def _final_metrics(workdir: str, step: int, last: dict) -> dict:
    """`final_metrics.json` content: the last logged `train/*` values (from this process or `metrics.jsonl`)
    and the final eval."""
    out = {"step": step}
    if not any(k.startswith("train/") for k in last) and storage.exists(storage.join(workdir, "metrics.jsonl")):
        for r in metrics_lib.read_metrics(workdir):
            if "train/loss" in r and r["step"] <= step:
                out.update({k: v for k, v in r.items() if k.startswith("train/")})
    out.update({k: float(v) for k, v in last.items()})
    return out


def train_and_evaluate(config, workdir: str, devices=None):
    """Trains `config` in `workdir` (a local folder or a `gs://` URL), resuming from its newest good checkpoint.

    Args:
      config: an `ml_collections.ConfigDict` as returned by a `configs/*.py` `get_config`.
      workdir: run folder: `config.json`, `class_names.json`, `checkpoints/<step>/`, `metrics.jsonl`,
        `tensorboard/`, `log.txt`, `curves.png`, `final_metrics.json`, `lock` (held while a run trains; see
        `train/lock.py`).
      devices: devices for the mesh (default: all).

    Returns:
      `(state, last_metrics)`: the final train state (`{"step", "params", "opt_state"}`) and the last logged
      values (`"eval/accuracy"` … , `"goodput"`, `"time/…"`). A run that is already complete (its
      `final_metrics.json` has reached `total_steps`) returns `(None, final_metrics)` without restoring, locking or
      writing anything.

    Raises:
      validate.ConfigError / ValueError / FileNotFoundError: bad config or data, or a checkpoint that does not
        match the model — all before anything is written.
      storage.StorageError: the workdir's bucket is missing or unreachable (at start-up), the workdir cannot be
        written (read-only), or a write failed.
      lock.WorkdirBusyError: another run is training in this workdir.
      checkpoint.CheckpointError: a checkpoint save failed (the run stops at the next step; this error wins over
        the failures of other writes to the same disk or store), or checkpoints exist but none restores.
      FloatingPointError: the loss became NaN/inf; names the step range and the last good checkpoint.
      RunError: any other failure once training has begun (e.g. an unreadable image), as one line.
      Preempted / Interrupted: SIGTERM / Ctrl-C; raised after the checkpoint of the current step is complete.
    """
    account = timing.TimeAccount()
    runlog = runlog_lib.RunLog().start()  # buffers the records until the workdir may be written
    try:
        logging.info("run in %s: %s; jax %s, %d %s devices, %d processes", workdir, " ".join(sys.argv),
                     jax.__version__, jax.device_count(), jax.default_backend(), jax.process_count())
        jax.config.update("jax_threefry_partitionable", True)  # Same parameters from the same seed on any mesh.
        parts = build(config, devices)
        storage.check_workdir(workdir)
        final_path = storage.join(workdir, "final_metrics.json")
        final = _complete(final_path, parts["total_steps"])
        if final is not None:
            return None, final
        cache_dir = configure_compilation_cache(config.get("compilation_cache_dir", "auto"))
        logging.info("persistent compilation cache: %s", cache_dir or "off")
        train_it = make_train_iterator(config, parts)
        # A fresh run's warm start is read before the workdir is touched: a bad init_from fails writing nothing.
        initial = _initial_state(config, parts, account) if config.get("init_from") and not _has_checkpoints(
            workdir) else None
        workdir_lock = _acquire_lock(workdir)
        try:
            return _train(config, workdir, parts, train_it, workdir_lock, runlog, account, initial)
        finally:
            if workdir_lock is not None:
                workdir_lock.release()
    finally:
        runlog.close(upload=False)  # _train uploads it with the metrics; here only the local file is closed


def _complete(final_path: str, total: int) -> dict | None:
    """`final_metrics.json` (without "step") if it says the run reached `total` steps, else None."""
    if not storage.exists(final_path):
        return None
    final = json.loads(storage.read_text(final_path))
    if final.get("step", -1) < total:
        return None
    logging.info("training already complete at step %d (%s): %s", final["step"], final_path,
                 ", ".join(f"{k} {v:.4g}" for k, v in final.items() if k.startswith("eval/")))
    return {k: v for k, v in final.items() if k != "step"}


def default_compilation_cache_dir() -> str:
    """`$XDG_CACHE_HOME/vit_jax_struct/jax_compilation_cache` (default `~/.cache/…`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vit_jax_struct", "jax_compilation_cache")


def configure_compilation_cache(setting: str) -> str | None:
    """Turns on JAX's persistent compilation cache (`config.compilation_cache_dir`); returns the folder, or None.

    `setting`: a folder or `gs://` URL (shared by every host of a pod; JAX reads it through etils epath), `""` (off),
    or `"auto"`: `JAX_COMPILATION_CACHE_DIR` when set in the environment (empty: off), else off for a multi-process
    CPU run (JAX writes the cache from process 0 only, and gloo gives CPU processes a fixed 30 s to meet at each new
    collective, which a warm process 0 and a compiling process 1 would miss), else `default_compilation_cache_dir()`.
    Every program is cached, however fast it compiled or small it is (JAX's default thresholds skip programs that
    compile in under 1 s, i.e. most CPU programs here). Call before the first compilation of the process: JAX
    initialises the cache once.
    """
    from jax.experimental.compilation_cache import compilation_cache

    _count_cache_events()
    if setting == "auto":
        if "JAX_COMPILATION_CACHE_DIR" in os.environ:
            return jax.config.jax_compilation_cache_dir or None
        multi_cpu = jax.process_count() > 1 and jax.default_backend() == "cpu"
        setting = "" if multi_cpu else default_compilation_cache_dir()
    target = str(storage.path(setting)) if setting else None
    if target != jax.config.jax_compilation_cache_dir:
        compilation_cache.reset_cache()  # JAX opens the cache once per process: another folder needs a reset
        jax.config.update("jax_compilation_cache_dir", target)
    if target:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return target


CACHE_EVENTS = collections.Counter()  # "/jax/compilation_cache/cache_hits", "…/cache_misses" (entries written)


def _count_cache_events():
    if not getattr(_count_cache_events, "registered", False):
        jax.monitoring.register_event_listener(
            lambda event, **kw: CACHE_EVENTS.update([event]) if event.startswith("/jax/compilation_cache/") else None)
        _count_cache_events.registered = True


def _acquire_lock(workdir: str):
    """Process 0 takes the workdir's lock; every process fails together if it is busy (multi-host)."""
    held, error = None, None
    if jax.process_index() == 0:
        try:
            held = lock.WorkdirLock(workdir).acquire()
        except (lock.WorkdirBusyError, storage.StorageError) as e:
            error = e
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        ok = multihost_utils.broadcast_one_to_all(np.int32(error is None))
        if not ok and error is None:
            error = lock.WorkdirBusyError(f"workdir {workdir} is in use by another run (see process 0's log)")
    if error is not None:
        raise error
    return held


def _has_checkpoints(workdir: str) -> bool:
    """Whether `workdir/checkpoints/` holds a step folder (a run to resume; whether it restores is checked later)."""
    directory = storage.join(workdir, "checkpoints")
    return storage.isdir(directory) and any(name.isdigit() for name in storage.listdir(directory))


def _initial_state(config, parts, account):
    """The state a run without a checkpoint starts from: initialised from `config.seed`, with the parameters of
    `config.init_from` when set (optimizer state fresh). Raises FileNotFoundError / ValueError naming init_from
    (see `checkpoint.load_params`); writes nothing."""
    state = parts["init_state"](jax.random.fold_in(jax.random.key(config.seed), 0))
    if config.get("init_from"):
        with account.measure("restore"):
            weights = official.is_weights_file(config.init_from)  # .npz, timm / HF safetensors: models/official.py
            try:
                params, src_step = checkpoint.load_params(
                    config.init_from, parts["abstract_state"]["params"], state["params"],
                    checkpoint.official_options(config, parts["model"]) if weights else None,
                    reinit=config.get("init_reinit"))
            except FileNotFoundError as e:  # every such message names the key the user set
                if str(e).startswith("config.init_from"):
                    raise
                raise FileNotFoundError(f"config.init_from: {e}") from e
        state["params"] = params
        logging.info("warm start: parameters from %s (step %d); optimizer state fresh", config.init_from, src_step)
    return state


def _train(config, workdir, parts, train_it, workdir_lock, runlog, account, initial=None):
    mesh, abstract_state = parts["mesh"], parts["abstract_state"]
    state_sh = jax.tree.map(lambda s: s.sharding, abstract_state)
    save_checkpoints = config.get("save_checkpoints", True)
    ckpt = checkpoint.Checkpointer(storage.join(workdir, "checkpoints"), config.get("keep_checkpoints", 3),
                                   timeout_s=config.get("checkpoint_timeout_s", 1200),
                                   read_only=not save_checkpoints)  # no empty checkpoints/ for a run that saves none
    total = parts["total_steps"]
    with account.measure("restore"):
        # Raises on a model or data.worker_count mismatch, writing nothing.
        latest, state = ckpt.restore_latest(abstract_state, train_it,
                                            None if parts["device_input"] else config.data.get("worker_count", 0))
    if latest is not None:
        logging.info("resuming from checkpoint %s (step %d of %d)", ckpt.step_dir(latest), latest, total)
    else:  # the state read before the lock, or (checkpoints there, none restored) read now
        state = initial if initial is not None else _initial_state(config, parts, account)
    runlog.open(workdir)  # the run writes from here on: config.json, log.txt (with the records so far), metrics
    if jax.process_index() == 0:
        _write_config(config, workdir, latest or 0)
        if parts["class_names"] is not None:  # label order, for exported weights (vit_jax_struct/export.py)
            storage.write_text(storage.join(workdir, CLASS_NAMES), json.dumps(list(parts["class_names"])))
        if parts["permutation"] is not None:
            pm = parts["permutation"]
            permute.save_permutation(workdir, pm["perm"], pm["patch"], config.data.image_size, pm["seed"])

    num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract_state["params"]))
    logging.info("model %s: %s parameters (%.2f M); mesh %s; global batch %d (%d per host)",
                 config.model.get("variant") or config.model.get("name"), f"{num_params:,}", num_params / 1e6,
                 dict(mesh.shape), config.batch_size, parts["per_host_batch"])
    logging.info("%s", runlog_lib.data_line(config, parts))
    logging.info("%s", runlog_lib.augmentation_line(config))
    logging.info("train input %s%s", device_input.placement(config, parts["device_input"]),
                 f" ({parts['no_device_input']})" if parts["no_device_input"] else "")
    code = runlog_lib.code_version()
    logging.info("code: %s", code)

    train_step = make_train_step(config, parts["model"], parts["tx"], parts["schedule"], parts["num_classes"],
                                 mesh, state_sh, make_augment(config, parts))
    eval_step = make_eval_step(config, parts["model"], parts["num_classes"], mesh, model_variables(state_sh))
    fewshot_every = config.get("fewshot", {}).get("every_steps", 0)
    fewshot_evaluator = fewshot_eval.FewShotEvaluator(
        config, parts["model"], parts["eval_pp"], mesh, model_variables(state_sh),
        parts["eval_per_host_batch"]) if fewshot_every else None
    logging.info("%s", runlog_lib.eval_cost_line(
        config, len(parts["eval_source"]),
        {k: (len(a), len(b)) for k, (a, b, _) in fewshot_evaluator.sets.items()} if fewshot_evaluator else None))
    writer = metrics_lib.MetricWriter(workdir, config.get("tensorboard", True), resume_step=latest or 0,
                                      flush_secs=config.get("metrics_flush_secs", 30.0), runlog=runlog)
    profiler = StepProfiler(config.get("profile", {}), workdir)
    stop_signals = _StopSignals()
    log_every = config.get("log_every_steps", 50)
    eval_every = config.get("eval_every_steps", 0)
    ckpt_every = config.get("checkpoint_every_steps", 0) if save_checkpoints else 0
    examples_per_epoch = len(parts["train_source"])
    step = int(jax.device_get(state["step"]))
    last = {}
    nonfinite = jnp.zeros((), jnp.int32)
    skipped = 0  # examples replaced because they could not be decoded (data.decode_errors='skip')
    checked_step = step  # Steps up to here are known to have finite losses.
    compiled = False
    m = None

    def check_finite(upto):
        nonlocal checked_step
        if int(jax.device_get(nonfinite)):
            good = ckpt.latest_step()
            where = (f"the last good checkpoint is step {good} in {ckpt.directory}; lower optim.lr or raise "
                     "optim.warmup_steps, then rerun to resume from it" if good is not None else
                     "no checkpoint was written before it; lower optim.lr or raise optim.warmup_steps and rerun "
                     "(it starts over)")
            raise FloatingPointError(f"the train loss became NaN or inf between steps {checked_step + 1} and "
                                     f"{upto}; {where}.")
        checked_step = upto

    def finish_pending():  # The queued steps complete before eval or a save is timed (not per step).
        if m is not None:
            jax.block_until_ready(m)

    curves_drawn = [time.time()]
    one_step_in_flight = sharding.one_program_in_flight(mesh)  # a simulated CPU mesh: no steps queued ahead

    def save(step):
        check_finite(step)  # Never write a checkpoint of NaN parameters.
        finish_pending()
        with account.measure("checkpoint"):
            writer.flush()  # Every record up to the checkpoint is durable before it is.
            ckpt.save(step, state, train_it)
            # curves.png is redrawn at a checkpoint at most once a CURVES_EVERY_S (drawing takes ~0.6 s: 8 % of a
            # short run's time at every checkpoint), at a pre-emption, and at the end of the run (below).
            if time.time() - curves_drawn[0] >= CURVES_EVERY_S or stop_signals.signum is not None:
                write_curves(writer, workdir, config)
                curves_drawn[0] = time.time()

    try:
        if step >= total:
            logging.info("training already complete at step %d; evaluating the final parameters", step)
        account.start_loop()
        step_log = step
        while step < total:
            profiler.before_step(step + 1)
            with account.measure("data_wait"):
                host_batch = next(train_it)
            skipped += int(host_batch.pop("skipped", np.zeros(0)).sum())
            batch = sharding.global_batch(host_batch, mesh)
            with jax.profiler.StepTraceAnnotation("train", step_num=step + 1):
                if not compiled:  # This process's first step: tracing + compiling (or a cache hit), timed alone.
                    with account.measure("compile"):
                        state, m = train_step(state, batch)
                    compiled = True
                    logging.info("first train step compiled and dispatched in %.1f s (%.1f s since start); "
                                 "persistent compilation cache: %d hits, %d entries written so far",
                                 account.total["compile"], time.time() - account.start,
                                 CACHE_EVENTS["/jax/compilation_cache/cache_hits"],
                                 CACHE_EVENTS["/jax/compilation_cache/cache_misses"])
                else:
                    state, m = train_step(state, batch)
            if one_step_in_flight:
                jax.block_until_ready(m["nonfinite"])
            nonfinite = nonfinite + m["nonfinite"]
            step += 1
            profiler.after_step(step, m, account)
            ckpt.check(step)  # A failed background save stops the run now, not one interval later.
            if workdir_lock is not None:
                workdir_lock.check()
            if step % log_every == 0 or step == total:
                check_finite(step)
                mh = jax.device_get(m)
                times = account.interval()
                # images/s over the interval's time in train steps and data waits: evaluation, few-shot, checkpoint,
                # compile and profile time inside the interval are not counted (nor are their steps missing).
                busy = times["time/train_step"] + times["time/data_wait"]
                ips = (step - step_log) * config.batch_size / max(busy, 1e-9)
                eta = (total - step) * config.batch_size / max(ips, 1e-9)
                last = {"train/loss": mh["loss"], "train/lr": mh["lr"], "train/grad_norm": mh["grad_norm"],
                        "train/epoch": step * config.batch_size / examples_per_epoch, "train/images_per_sec": ips}
                if config.data.get("decode_errors", "raise") == "skip":
                    last["data/skipped"] = skipped
                    skipped = 0
                writer.write(step, {**last, **times})
                logging.info("step %d/%d: loss %.4f, lr %.3g, grad norm %.3g, %.1f img/s, ETA %s (data wait %.0f %%)",
                             step, total, mh["loss"], mh["lr"], mh["grad_norm"], ips, _format_eta(eta),
                             100 * times["time/data_wait"] / max(sum(times.values()), 1e-9))
                step_log = step
            if eval_every and (step % eval_every == 0 or step == total):
                finish_pending()
                with account.measure("eval"):
                    ev = evaluate(eval_step, model_variables(state), parts, mesh)
                writer.write(step, ev)
                last.update(ev)
                logging.info("step %d/%d: eval accuracy %.4f, eval loss %.4f", step, total, ev["eval/accuracy"],
                             ev["eval/loss"])
            if fewshot_every and (step % fewshot_every == 0 or step == total):
                finish_pending()
                with account.measure("fewshot"):
                    fs = fewshot_evaluator.run(model_variables(state))
                writer.write(step, fs)
                last.update(fs)
            stopping = stop_signals.reached(step)
            if (save_checkpoints and step == total) or (ckpt_every and step % ckpt_every == 0) or \
                    (stopping and save_checkpoints):
                save(step)
            if stopping:
                with account.measure("checkpoint"):
                    ckpt.wait()
                writer.write(step, account.interval())  # the time since the last log step, too
                account.stop_loop()
                logging.info("time: %s", timing.format_summary(account.summary()))
                writer.flush()
                kind = Interrupted if stop_signals.signum == signal.SIGINT else Preempted
                stop = kind(step, total, ckpt.directory, saved=save_checkpoints)
                logging.warning("%s", stop)
                raise stop
        account.stop_loop()
        if step >= total and "eval/accuracy" not in last:
            with account.measure("eval"):
                ev = evaluate(eval_step, model_variables(state), parts, mesh)
            writer.write(step, ev)
            last.update(ev)
            logging.info("final eval accuracy %.4f at step %d", ev["eval/accuracy"], step)
        with account.measure("checkpoint"):
            ckpt.wait()  # The final checkpoint is complete before the run says it is.
        profiler.close()
        account.interval()
        summary = account.summary()
        logging.info("time: %s", timing.format_summary(summary))
        last.update(summary)
        if jax.process_index() == 0 and step >= total:
            writer.flush()
            final = {**_final_metrics(workdir, step, last), "code": code, "device": device_description()}
            storage.write_text(storage.join(workdir, "final_metrics.json"), json.dumps(final, indent=2))
            write_curves(writer, workdir, config)
            outputs = ["config.json", "metrics.jsonl", "final_metrics.json", "log.txt"]
            if config.get("tensorboard", True):
                outputs.append("tensorboard/")
            if save_checkpoints:
                outputs.append(f"checkpoints/{step}/")
            outputs.append("curves.png")
            logging.info("%s", runlog_lib.closing_line(workdir, step, final, outputs))
    except BaseException as e:
        stop_signals.close()
        profiler.close()
        error = _stop_after_error(e, ckpt, writer, runlog)
        if error is e:
            raise
        raise error from e
    stop_signals.close()
    try:
        ckpt.close()
    finally:
        writer.close()
    return state, last


_STORE_ERRORS = (OSError, checkpoint.CheckpointError)  # StorageError is an OSError


def _stop_after_error(e: BaseException, ckpt, writer, runlog) -> BaseException:
    """Closes the checkpointer and the writers after `e` stopped the loop; returns the error to raise.

    A failed background save is the cause when another write to the same disk or store failed after it (disk full:
    the TensorBoard flush fails first), so its `CheckpointError` (naming the checkpoint folder) wins. After a store
    failure the writers close without another upload (it would wait out the store's retries once more). Errors of a
    data source or model found mid-run (ValueError, …) become `RunError` (exit code 1, not the usage code 2)."""
    errors = [e]
    store_failed = isinstance(e, _STORE_ERRORS)
    try:
        ckpt.close()
    except Exception as c:
        logging.debug("while stopping: %s", c)
        if isinstance(c, checkpoint.CheckpointError) and isinstance(e, OSError) and \
                not isinstance(e, checkpoint.CheckpointError):
            errors.insert(0, c)
        else:
            errors.append(c)
        store_failed = True
    try:
        writer.close(upload=not store_failed)
    except Exception as c:
        errors.append(c)
    error = errors[0]
    if not isinstance(error, (storage.StorageError, checkpoint.CheckpointError, FloatingPointError,
                              lock.WorkdirBusyError, Preempted, KeyboardInterrupt, SystemExit, RunError)) \
            and isinstance(error, Exception):
        error = RunError(runlog_lib.short_error(error))
    for other in errors[1:]:
        if other is not error:
            logging.warning("while stopping after the error: %s", runlog_lib.short_error(other))
    text = "interrupted (a second Ctrl-C)" if isinstance(error, KeyboardInterrupt) else \
        runlog_lib.short_error(error, 2000)  # as main.py prints it
    runlog.note_library_errors()
    if not isinstance(error, Preempted):  # (a pre-emption has logged its own line)
        runlog.note(f"error: {text}")
    try:
        runlog.close(upload=not store_failed)
    except Exception as c:
        logging.warning("could not write log.txt: %s", runlog_lib.short_error(c))
    return error


CURVES_EVERY_S = 60.0  # seconds between redraws of curves.png at checkpoints (the last one is always drawn)


def write_curves(writer, workdir: str, config) -> None:
    """Draws `workdir/curves.png` from the records written so far (process 0; a failure to draw is a warning).

    Raises:
      storage.StorageError: the file cannot be written (disk full, store gone)."""
    if jax.process_index() != 0:
        return
    records = writer.records()
    try:
        title = f"{storage.basename(workdir)}: {config.model.get('variant') or config.model.get('name')}"
        curves.training_curves({storage.basename(workdir): records}, storage.join(workdir, "curves.png"), title)
    except storage.StorageError:
        raise
    except Exception as e:  # a plotting problem must not stop training
        logging.warning("could not draw curves.png: %s", runlog_lib.short_error(e))


class StepProfiler:
    """`config.profile`: a `jax.profiler` trace of train steps `start_step … start_step + num_steps - 1` (numbered
    as logged: step N is the N-th update) under `workdir/tensorboard/plugins/profile/<time>/` (TensorBoard's profile
    plugin and XProf read it). `process_index` traces that process only (-1: every process). A `gs://` workdir:
    traced into a local folder, uploaded when the trace stops. `num_steps=0`: off.

    Steps are annotated (`StepTraceAnnotation`), so the profile shows per-step times; the trace stops after waiting
    for the last traced step, so it holds its device work."""

    def __init__(self, profile_config, workdir: str):
        cfg = dict(profile_config or {})
        self.start, self.num = int(cfg.get("start_step", 10)), int(cfg.get("num_steps", 0))
        who = int(cfg.get("process_index", 0))
        self.enabled = self.num > 0 and who in (-1, jax.process_index())
        self.target = storage.join(workdir, "tensorboard")
        self.staging = None
        self.active = self.done = False

    def before_step(self, step: int) -> None:
        """Starts the trace before step `step` if it is in the range."""
        if not self.enabled or self.active or self.done or not self.start <= step < self.start + self.num:
            return
        import tempfile

        if storage.is_url(self.target):
            self.staging = tempfile.mkdtemp(prefix="profile-")
        else:
            storage.makedirs(self.target)
        jax.profiler.start_trace(self.staging or str(storage.path(self.target)))
        self.active = True
        logging.info("profiler: tracing steps %d to %d", step, self.start + self.num - 1)

    def after_step(self, step: int, metrics, account) -> bool:
        """Stops the trace after the last traced step (waiting for its results); True if it stopped."""
        if not self.active or step < self.start + self.num - 1:
            return False
        with account.measure("profile"):
            jax.block_until_ready(metrics)
            self.close()
        return True

    def close(self) -> None:
        """Stops a running trace and (object stores) uploads it."""
        if not self.active:
            return
        self.active, self.done = False, True
        jax.profiler.stop_trace()
        if self.staging:
            for d, _, files in os.walk(self.staging):
                for f in files:
                    rel = os.path.relpath(os.path.join(d, f), self.staging)
                    with open(os.path.join(d, f), "rb") as fh:
                        storage.write_bytes(storage.join(self.target, *rel.split(os.sep)), fh.read())
            shutil.rmtree(self.staging, ignore_errors=True)
        logging.info("profiler: trace written under %s", storage.join(self.target, "plugins", "profile"))
