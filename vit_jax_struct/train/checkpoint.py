"""Orbax checkpoints of the train state and the grain iterator, in `workdir/checkpoints/<step>/`.

Each step directory holds two items: `state` (`{"step", "params", "opt_state"}`, `StandardSave`) and `data` (the
grain iterator's position, `grain.checkpoint.CheckpointSave`, one file per process). Orbax writes into a temporary
directory and renames it when complete, so `checkpoints/<step>` exists only for a finished checkpoint and a failed
save never removes the last good one. Restores take target `ShapeDtypeStruct`s carrying shardings, so a checkpoint
written on one mesh restores onto any other (different device count included).
"""

from __future__ import annotations

import json
import re
import time

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vit_jax_struct import storage
from vit_jax_struct.models import bit, official, vit
from vit_jax_struct.train.runlog import short_error
from vit_jax_struct.train.sharding import path_str


def _flat_shapes(tree) -> dict[str, tuple]:
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
    return {path_str(p): tuple(x.shape) for p, x in leaves}


def check_tree_match(expected, found, where: str, what: str = "params") -> None:
    """Raises if two trees of arrays/metadata differ in paths or shapes.

    Args:
      expected: the model's tree (arrays or `ShapeDtypeStruct`s).
      found: the checkpoint's tree (arrays or Orbax `ArrayMetadata`).
      where: the checkpoint location, for the message.

    Raises:
      ValueError: naming the first mismatched path with both shapes, and what is missing on each side.
    """
    a, b = _flat_shapes(expected), _flat_shapes(found)
    missing_ckpt = sorted(set(a) - set(b))
    missing_model = sorted(set(b) - set(a))
    shape_diff = [k for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    if not (missing_ckpt or missing_model or shape_diff):
        return
    if shape_diff:
        k = shape_diff[0]
        first = f"first mismatch at '{what}/{k}': checkpoint shape {b[k]} vs model shape {a[k]}"
    else:
        k = (missing_ckpt or missing_model)[0]
        first = f"first mismatch at '{what}/{k}': " + (
            f"in the model {a[k]} but not in the checkpoint" if k in a else
            f"in the checkpoint {b[k]} but not in the model")
    raise ValueError(
        f"checkpoint {where} does not match the model ({len(shape_diff)} shape mismatches); {first}. "
        f"Missing in checkpoint: {missing_ckpt[:5]}{' …' if len(missing_ckpt) > 5 else ''}; "
        f"missing in model: {missing_model[:5]}{' …' if len(missing_model) > 5 else ''}. "
        "Use another workdir, or the model config the checkpoint was written with.")


def _layout_target(abstract, scanned: bool):
    """`abstract` (ShapeDtypeStructs with shardings) in the scanned/unscanned ViT layout, replicated on its mesh.

    Used to read a checkpoint written with the other `model.scan` setting: it is restored replicated (every device
    holds the whole state once), then `_convert_to` re-lays it out and shards it as the model needs.
    """
    shapes = jax.eval_shape(lambda t: vit.convert_layout(t, scanned), abstract)
    mesh = jax.tree.leaves(abstract)[0].sharding.mesh
    repl = NamedSharding(mesh, P())
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=repl), shapes)


def _convert_to(tree, abstract):
    """Converts a restored tree to `abstract`'s ViT layout (scanned or not) and shardings."""
    shardings = jax.tree.map(lambda s: s.sharding, abstract)
    scanned = vit.is_scanned(abstract.get("params", abstract))
    return jax.jit(lambda t: vit.convert_layout(t, scanned), out_shardings=shardings)(tree)


def _item_handlers():
    # Named handlers, so metadata of a checkpoint written by another process can be read before restoring.
    return {"state": ocp.StandardCheckpointHandler(), "data": grain.checkpoint.CheckpointHandler()}


_TMP_SUFFIX = ".orbax-checkpoint-tmp"  # Orbax writes a step here and renames it to `<step>` once complete

# OS causes a failed write reports, in TensorStore's and Python's words: the one line a user needs.
_OS_CAUSES = ("No space left on device", "Disk quota exceeded", "Read-only file system", "Permission denied",
              "Input/output error")


def storage_cause(e: BaseException) -> str:
    """The cause of a failed write in a few words: the OS error named inside `e` (TensorStore wraps it in a long
    message naming one array file among hundreds), or `short_error(e)`."""
    text = str(e)
    for cause in _OS_CAUSES:
        if cause in text:
            return cause
    return short_error(e, 300)


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or no checkpoint of a workdir restores; the message names the path."""


class DataStateMismatch(ValueError):
    """A checkpoint's data-iterator state was written with another `data.worker_count` than the run's: grain's
    iterator state has another structure per worker count, so it cannot continue the same example stream."""


def data_workers_of_state(state: dict) -> int:
    """The `data.worker_count` a grain train-iterator state (`pipeline.train_iterator(...).get_state()`) was written
    with: 0 for reader threads (`{"next_index": …}`), N for N worker processes (one interleaved iterator state per
    worker, `iterators_in_use_states`)."""
    return len(state["iterators_in_use_states"]) if "iterators_in_use_states" in state else 0


def data_state_problem(saved: dict, data_iterator, data_workers: int | None) -> str | None:
    """Why a checkpoint's data-iterator state `saved` cannot continue `data_iterator`'s example stream, or None.

    The device input's iterator (`data/device_input.InMemoryBatches`) judges its own states (`state_problem`); a
    grain iterator cannot continue a device-input state, nor a grain state written with another `data.worker_count`
    (`data_workers`, when given)."""
    own = getattr(data_iterator, "state_problem", None)
    if own is not None:
        return own(saved)
    if "device_input" in saved:
        return ("its data state was written by the input on the device (data.device_augment=True), this run reads "
                "through the host pipeline: resume with --config.data.device_augment=True (or train in a new workdir)")
    if data_workers is not None and data_workers_of_state(saved) != int(data_workers):
        n = data_workers_of_state(saved)
        return (f"written with data.worker_count={n}, this run has data.worker_count={data_workers}: the "
                "data-iterator state of one cannot continue the other's example stream. Resume with "
                f"--config.data.worker_count={n} (or train in a new workdir).")
    return None


# Files of a step folder that Orbax and grain parse as JSON; a truncated one is reported by name before restoring.
_JSON_FILES = ("_CHECKPOINT_METADATA", "state/_METADATA", "state/_sharding")


class Checkpointer:
    """Saves/restores `(train state, data iterator)` under `directory` with an Orbax `CheckpointManager`.

    Local folders and `gs://` URLs alike (Orbax's tensorstore writes the arrays; the step folder counts only once
    its commit marker is written, so a pre-empted save never replaces the last good checkpoint). Step folders are
    created synchronously in `save`, so an unusable folder fails there, and `check()` (called every step by the
    train loop) re-raises a failed background write at once.

    Args:
      directory: e.g. `workdir/checkpoints`.
      keep: how many of the most recent checkpoints to keep (None: all).
      async_save: write in a background thread (the train loop goes on; `wait()` blocks).
      timeout_s: the longest a background save may take before it is reported as failed.

    Raises:
      CheckpointError: `directory` (or a parent) exists and is not a folder, or cannot be created.
    """

    def __init__(self, directory: str, keep: int | None = 3, async_save: bool = True, timeout_s: int = 1200,
                 read_only: bool = False):
        self.directory = str(storage.path(directory))
        if not read_only:
            try:
                storage.makedirs(self.directory)
            except storage.StorageError as e:
                raise CheckpointError(f"checkpoint folder {self.directory} cannot be used: {e}") from e
        self.manager = ocp.CheckpointManager(
            self.directory, item_handlers=_item_handlers(), options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, enable_async_checkpointing=async_save, create=not read_only,
                read_only=read_only,
                async_options=ocp.AsyncOptions(timeout_secs=int(timeout_s), create_directories_asynchronously=False)))
        self._async = bool(async_save)
        self._pending: int | None = None  # the step whose background save is in flight
        self._failed_steps: set[int] = set()  # steps whose save failed: their partial folders are moved aside

    def latest_step(self) -> int | None:
        """Step of the newest complete checkpoint, or None."""
        return self.manager.latest_step()

    def step_dir(self, step: int) -> str:
        return storage.join(self.directory, str(step))

    def check(self, step: int | None = None) -> None:
        """Raises `CheckpointError` if the background save in flight has failed (disk full, folder gone, store down).

        Cheap enough for every step: a flag read, and a join of the finished background threads once the save has
        ended. The error names the step whose save failed (and `step`, the train step reached, if given); its
        partial folder is moved aside (see `_failed`)."""
        try:
            try:
                self.manager.check_for_errors()
            except Exception as e:
                self._failed(self._pending, e)
            if self._pending is not None and not self.manager.is_saving_in_progress():
                self._settle()
        except CheckpointError as e:
            if step is None:
                raise
            raise CheckpointError(f"{e}; the run stopped at step {step}") from e.__cause__

    def _settle(self) -> None:
        """Waits for the save in flight (at once if it has ended) and raises `CheckpointError` naming its step if it
        failed; a save that ended without an error but left its temporary folder counts as failed too."""
        step = self._pending
        try:
            self.manager.wait_until_finished()
            self.manager.check_for_errors()
        except Exception as e:
            self._failed(step, e)
        self._pending = None
        if step is not None and not storage.is_url(self.directory) and \
                storage.exists(self.step_dir(step) + _TMP_SUFFIX):
            self._failed(step, RuntimeError(f"its temporary folder {self.step_dir(step)}{_TMP_SUFFIX} was never "
                                            "completed"))

    def _failed(self, step: int | None, e: BaseException):
        """Raises the `CheckpointError` for a failed save of `step` (None: not known) after moving the temporary
        folder it left (`<step>.orbax-checkpoint-tmp`, local disks only) to `checkpoints.broken/` (a rename: no space
        needed); a move that fails is logged, not raised."""
        self._pending = None
        if step is not None:
            self._failed_steps.add(step)
        what = f"checkpoint step {step} ({self.step_dir(step)})" if step is not None else \
            f"a checkpoint in {self.directory}"
        moved = self._move_partial(step) if step is not None else None
        good = self._latest_complete(exclude=step)
        resume = (f"the last complete checkpoint is step {good}: rerun the same command to resume from it once the "
                  "fault is fixed" if good is not None else "no complete checkpoint was written before it")
        raise CheckpointError(f"saving {what} failed: {storage_cause(e)}; "
                              + (f"its partial folder was moved to {moved}; " if moved else "") + resume) from e

    def _move_partial(self, step: int, wait: bool = True) -> str | None:
        """Moves `<step>.orbax-checkpoint-tmp` of a local checkpoint folder to `checkpoints.broken/<step>-<time>`.

        A bucket is left alone: the store that failed the save would fail (and retry) the copy too, and Orbax writes
        no temporary folder there; a resume moves the uncommitted step aside (`restore_latest`)."""
        src = self.step_dir(step) + _TMP_SUFFIX
        if jax.process_index() != 0 or storage.is_url(self.directory):
            return None
        try:  # An error can surface while other writers of the save still run: let them end first, or one of
            if wait:  # them recreates the folder after the move (seen on a loaded CPU).
                self.manager.wait_until_finished()
        except Exception:  # the same failure, already being reported
            pass
        try:
            if not storage.exists(src):
                return None
            dst = base = storage.join(self.directory + ".broken", f"{step}-{int(time.time())}")
            for n in range(2, 100):  # a folder recreated after the first move lands beside it, not onto it
                if not storage.exists(dst):
                    break
                dst = f"{base}.{n}"
            storage.move(src, dst)
            return dst
        except Exception as e:  # the error of the save still stands
            logging.warning("could not move the partial checkpoint %s aside: %s", src, short_error(e))
            return None

    def _sweep_failed(self, settle_s: float = 1.0, limit_s: float = 15.0) -> None:
        """Moves aside a partial folder of a failed step that a writer still running at the first move recreated
        (an error can surface before every writer of the save has ended, and tensorstore's own writer threads can
        outlive the manager's futures; seen on a loaded CPU): polls until no such folder has appeared for `settle_s`
        seconds (at most `limit_s`). Only a failed save pays this wait."""
        if not self._failed_steps or jax.process_index() != 0 or storage.is_url(self.directory):
            return
        start = quiet_since = time.monotonic()
        while True:
            for step in sorted(self._failed_steps):
                if storage.exists(self.step_dir(step) + _TMP_SUFFIX):
                    self._move_partial(step, wait=False)
                    quiet_since = time.monotonic()
            now = time.monotonic()
            if now - quiet_since >= settle_s or now - start >= limit_s:
                return
            time.sleep(0.05)

    def _latest_complete(self, exclude: int | None) -> int | None:
        """The newest step the manager finished, other than `exclude` (from memory: the store may be gone)."""
        try:
            steps = [s for s in self.manager.all_steps() if s != exclude]
        except Exception:
            return None
        return max(steps) if steps else None

    def save(self, step: int, state, data_iterator) -> None:
        """Saves `state` and the iterator position as checkpoint `step` (asynchronously if enabled).

        The previous save is waited for first, so its failure is reported under its own step.

        Raises:
          CheckpointError: this save could not start, or the previous background save failed.
        """
        self.check()
        if self._pending is not None:
            self._settle()
        try:
            self.manager.save(step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), data=grain.checkpoint.CheckpointSave(data_iterator)), force=True)
        except Exception as e:
            self._failed(step, e)
        if self._async:
            self._pending = step
        elif not storage.is_url(self.directory) and storage.exists(self.step_dir(step) + _TMP_SUFFIX):
            self._failed(step, RuntimeError("the save returned without completing the step folder"))

    def wait(self) -> None:
        """Blocks until pending saves are complete.

        Raises:
          CheckpointError: a pending save failed (naming its step).
        """
        self._settle()

    def restore(self, step: int, abstract_state, data_iterator=None, data_workers: int | None = None):
        """Restores checkpoint `step` onto `abstract_state`'s shardings and rewinds `data_iterator` in place (if given).

        `data_workers`: the run's `data.worker_count`; if given, it must be the one the checkpoint's data-iterator
        state was written with.

        Raises:
          ValueError: the checkpoint's parameter tree does not match `abstract_state["params"]`.
          DataStateMismatch: the checkpoint's data state comes from another `data.worker_count`.
        """
        where = self.step_dir(step)
        if data_iterator is not None:
            path = storage.join(where, "data", f"process_{jax.process_index()}-of-{jax.process_count()}.json")
            problem = data_state_problem(json.loads(storage.read_text(path)), data_iterator, data_workers)
            if problem:
                raise DataStateMismatch(f"checkpoint {where}: {problem}")
        meta = self.manager.item_metadata(step)["state"].tree
        convert = vit.is_scanned(meta["params"]) != vit.is_scanned(abstract_state["params"])
        target = _layout_target(abstract_state, vit.is_scanned(meta["params"])) if convert else abstract_state
        check_tree_match(target["params"], meta["params"], where)
        items = {"state": ocp.args.StandardRestore(target)}
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
        state = self.manager.restore(step, args=ocp.args.Composite(**items))["state"]
        return _convert_to(state, abstract_state) if convert else state

    def _check_files(self, step: int) -> None:
        """Raises ValueError naming the first missing or unparsable metadata file of step folder `step`."""
        d = self.step_dir(step)
        names = [*_JSON_FILES, f"data/process_{jax.process_index()}-of-{jax.process_count()}.json"]
        for name in names:
            p = storage.join(d, name)
            if name == "state/_sharding" and not storage.exists(p):
                continue  # Optional in Orbax's layout.
            try:
                json.loads(storage.read_text(p))
            except FileNotFoundError:
                raise ValueError(f"file {p} is missing") from None
            except ValueError as e:
                raise ValueError(f"file {p} is corrupt ({e})") from None

    def restore_latest(self, abstract_state, data_iterator=None, data_workers: int | None = None):
        """Restores the newest step that restores: `(step, state)`, or `(None, None)` when there is no checkpoint.

        Empty, partial or corrupt step folders are skipped with a warning naming the step and the file; each one
        skipped is moved to `checkpoints.broken/<step>` (nothing is deleted), so later saves and resumes do not
        meet it again.

        `data_workers`: the run's `data.worker_count`, checked against the checkpoint's (see `restore`).

        Raises:
          ValueError: the newest readable checkpoint does not match the model, or (DataStateMismatch) its data state
            comes from another `data.worker_count` (user errors; nothing is skipped or moved).
          CheckpointError: step folders exist but none restores; lists each step tried and why.
        """
        steps = sorted(self.manager.all_steps(), reverse=True)
        tried = []
        for step in steps:
            try:
                self._check_files(step)
                self.manager.item_metadata(step)["state"].tree  # noqa: B018 -- raises on unreadable metadata
            except Exception as e:
                tried.append((step, short_error(e, 300)))
                logging.warning("checkpoint step %d in %s is unreadable, skipping it: %s", step, self.directory,
                                tried[-1][1])
                continue
            try:
                state = self.restore(step, abstract_state, data_iterator, data_workers)
            except DataStateMismatch:
                raise
            except ValueError as e:
                if "does not match the model" in str(e):
                    raise
                tried.append((step, short_error(e, 300)))
            except Exception as e:  # TensorStore's errors carry the whole JSON spec: the first line, cut short
                tried.append((step, short_error(e, 300)))
            else:
                self._set_aside([s for s, _ in tried])
                return step, state
            logging.warning("checkpoint step %d in %s does not restore, skipping it: %s", step, self.directory,
                            tried[-1][1])
        if tried:
            listing = "; ".join(f"step {s}: {why}" for s, why in tried)
            raise CheckpointError(
                f"no checkpoint in {self.directory} restores (tried {len(tried)}: {listing}). Not starting from "
                "scratch over existing checkpoints: move them away (or use another --workdir) to start over.")
        return None, None

    def _set_aside(self, steps) -> None:
        if not steps:
            return
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("vit_jax_struct:checkpoint-set-aside")
        if jax.process_index() == 0:
            for step in steps:
                dst = storage.join(self.directory + ".broken", f"{step}-{int(time.time())}")
                storage.move(self.step_dir(step), dst)
                logging.warning("moved the unreadable checkpoint step %d to %s", step, dst)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices("vit_jax_struct:checkpoint-set-aside-done")
        self.manager.reload()

    def close(self) -> None:
        """Waits for pending saves, then closes the manager.

        Raises:
          CheckpointError: a pending save failed (the manager is closed all the same), or closing failed.
        """
        try:
            self.wait()
        except CheckpointError:
            try:
                self.manager.close()
            except Exception as e:  # the same failure again: the first report is the one to keep
                logging.debug("closing the checkpoint manager after a failed save: %s", short_error(e))
            self._sweep_failed()
            raise
        self._sweep_failed()
        try:
            self.manager.close()
        except Exception as e:
            raise CheckpointError(f"closing the checkpoints in {self.directory} failed: {short_error(e)}") from e


def official_options(config, model) -> dict:
    """Keyword arguments of `official.load` (ViT) or `bit.load` (ResNetV2) from `config.init_*` and the model
    (classifier, patch grid); a ResNetV2 gets `{"layout": "bit", "reinit": …}`.

    Raises:
      ValueError: the model is neither a ViT nor a ResNetV2, `config.init_posemb_grid` is not `"h,w"`, or the
        file's GELU (`official.checkpoint_gelu`) is not `model.gelu` (a file that does not say: a one-line warning,
        `official.activation_warning`, which also names the GELU and LayerNorm epsilon of timm's CLIP towers).
    """
    name = config.model.get("name", "vit")
    if name == "resnetv2":
        return dict(layout="bit", reinit=config.get("init_reinit", bit.DEFAULT_REINIT))
    if name != "vit":
        raise ValueError(f"config.init_from {config.init_from!r}: a weights file loads into a ViT (vit_jax, "
                         "big_vision .npz; timm .safetensors; Hugging Face folder) or a ResNetV2 (BiT .npz) only, "
                         f"not model.name {config.model.name!r}")
    if config.get("init_from"):
        warning = official.activation_warning(config.init_from, config.model.get("gelu", "tanh"),
                                              config.model.get("layer_norm_eps", 1e-6))
        if warning:
            logging.warning("%s", warning)
    p = model.arch()["patch_size"]
    src = config.get("init_posemb_grid", "")
    try:
        source_grid = tuple(int(x) for x in src.split(",")) if src else None
    except ValueError:
        source_grid = ()
    if source_grid is not None and len(source_grid) != 2:
        raise ValueError(f"config.init_posemb_grid {src!r} is not 'h,w' (the checkpoint's patch grid), e.g. '24,32'")
    return dict(classifier=config.model.get("classifier", "token"),
                grid=(config.data.image_size // p, config.data.image_size // p), source_grid=source_grid,
                reinit=config.get("init_reinit", official.DEFAULT_REINIT),
                posemb_resize=config.get("init_posemb_resize", "zoom"),
                convert_classifier=config.get("init_convert_classifier", False))


def _place(tree, abstract):
    """Host numpy leaves -> global arrays with the shardings of `abstract` (any process count); arrays stay put."""
    def put(x, s):
        if isinstance(x, np.ndarray):
            return jax.make_array_from_callback(s.shape, s.sharding, lambda idx: x[idx])
        return jax.device_put(x, s.sharding)
    return jax.tree.map(put, tree, abstract)


def load_params(path: str, abstract_params, init_params=None, npz_options: dict | None = None,
                reinit: str | None = None):
    """Loads only the parameters of a checkpoint (warm start, `config.init_from`), sharded like `abstract_params`.

    Args:
      path: a workdir (its latest checkpoint), a `checkpoints/` folder (latest), or one `checkpoints/<step>` folder;
        or a ViT weights file (`official.is_weights_file`: a vit_jax / big_vision `.npz`, a timm `.safetensors`, a
        Hugging Face model folder or its `model.safetensors`; local or URL), read by `models.official.load`
        (renamed, posemb resampled, parameters matching `npz_options["reinit"]` taken from `init_params`), or a
        published BiT `.npz` into a ResNetV2 (`npz_options["layout"] == "bit"`, read by `models.bit.load`).
      abstract_params: `ShapeDtypeStruct`s with shardings of the model's parameters.
      init_params: the freshly initialised parameters (weights files only: the values of re-initialised entries).
      npz_options: keyword arguments of `official.load`, at least `classifier`, or `{"layout": "bit", "reinit": …}`
        (weights files only; see `official_options`).
      reinit: run checkpoints only: a regex of parameter paths (`config.init_reinit`, e.g. the head) that keep their
        value from `init_params` when their shape differs from the checkpoint's (fine-tuning onto another number of
        classes); every other difference is an error. One `init:` line logs what was loaded and re-initialised.

    Returns:
      `(params, step)`: step of the source checkpoint (0 for a weights file).

    Raises:
      FileNotFoundError: no checkpoint at `path`.
      ValueError: the parameter tree does not match the model (first mismatched path and both shapes; for a
        weights file, every unused, missing and mis-shaped entry); a non-`.npz` file for a ResNetV2.
    """
    if official.is_weights_file(path):
        if npz_options and npz_options.get("layout") == "bit" and not str(path).endswith(".npz"):
            raise ValueError(f"config.init_from {path!r}: a ResNetV2 loads the BiT .npz layout only (timm and "
                             "Hugging Face files load into a ViT); see docs/published_models.md")
        if not npz_options:
            raise ValueError(f"loading {path!r} needs npz_options with the model's classifier (official_options)")
        scanned = vit.is_scanned(abstract_params)
        reference = abstract_params if init_params is None else init_params
        if scanned:  # The published files are unscanned: load in that layout, then stack the blocks.
            reference = jax.eval_shape(vit.unstack_blocks, reference) if init_params is None else \
                vit.unstack_blocks(reference)
        if npz_options.get("layout") == "bit":
            params = bit.load(path, reference, reinit=npz_options.get("reinit", bit.DEFAULT_REINIT))
        else:
            params = official.load(path, reference, **npz_options)
        if scanned:
            params = jax.tree.map(np.asarray, vit.stack_blocks(params))
        return _place(params, abstract_params), 0
    directory, step, meta = _open_params(path)
    # A checkpoint of the other `model.scan` layout is read in its own layout, then converted.
    convert = vit.is_scanned(meta) != vit.is_scanned(abstract_params)
    target = _layout_target(abstract_params, vit.is_scanned(meta)) if convert else abstract_params
    fresh = _reinit_paths(target, meta, reinit if init_params is not None else None)
    if fresh:  # read at the checkpoint's shape (replicated), replaced by the fresh init below
        mesh = jax.tree.leaves(abstract_params)[0].sharding.mesh
        ckpt_shapes = _flat_shapes(meta)
        target = jax.tree_util.tree_map_with_path(
            lambda p, s: jax.ShapeDtypeStruct(ckpt_shapes[path_str(p)], s.dtype, sharding=NamedSharding(mesh, P()))
            if path_str(p) in fresh else s, target)
    check_tree_match(target, meta, storage.join(directory, str(step)))
    # Restore the params subtree only; the optimizer state of the source run is not read.
    restore_args = jax.tree.map(lambda s: ocp.ArrayRestoreArgs(sharding=s.sharding, global_shape=s.shape,
                                                               dtype=s.dtype), target)
    restored = _restore_params(directory, step, target, restore_args)
    if fresh:
        init_flat = {path_str(p): x for p, x in jax.tree_util.tree_flatten_with_path(init_params)[0]}
        restored = jax.tree_util.tree_map_with_path(
            lambda p, x: init_flat[path_str(p)] if path_str(p) in fresh else x, restored)
    n = len(jax.tree.leaves(restored)) - len(fresh)
    if fresh:
        ckpt_shapes, model_shapes = _flat_shapes(meta), _flat_shapes(abstract_params)
        what = (f"{sorted(fresh)} (checkpoint shapes {[tuple(ckpt_shapes[k]) for k in sorted(fresh)]}, "
                f"model {[tuple(model_shapes[k]) for k in sorted(fresh)]})")
    logging.info("init: loaded %d parameters from %s step %d, re-initialised %s", n, directory, step,
                 what if fresh else "none")
    return (_convert_to(restored, abstract_params) if convert else restored), step


def _reinit_paths(target, meta, reinit: str | None) -> set[str]:
    """Parameter paths whose shape differs between the model `target` and the checkpoint `meta` and that match
    `reinit` (kept at their fresh init); empty unless every other path and shape agrees (then `check_tree_match`
    reports the difference)."""
    if not reinit:
        return set()
    a, b = _flat_shapes(target), _flat_shapes(meta)
    differ = {k for k in set(a) & set(b) if a[k] != b[k]}
    rx = re.compile(reinit)
    if set(a) != set(b) or not differ or not all(rx.search(k) for k in differ):
        return set()
    return differ


def _open_params(path: str, step: int | None = None, what: str = "config.init_from"):
    """`(checkpoints folder, step, parameter metadata tree)` of a run checkpoint (see `load_params` for `path`);
    `step` None: the one `path` names, else the newest.

    Raises:
      FileNotFoundError: no such folder, no checkpoint in it, or no checkpoint `step` (listing the steps there);
        the message starts with `what` and `path`, or with `--step N` when the asked-for `step` is missing.
    """
    path = str(storage.path(path)).rstrip("/")
    if storage.isdir(storage.join(path, "checkpoints")):
        path = storage.join(path, "checkpoints")
    base = storage.basename(path)
    if base.isdigit() and storage.isdir(storage.join(path, "state")):
        directory, named = path[: -len(base) - 1], int(base)
    else:
        directory, named = path, None
    if not storage.isdir(directory):
        raise FileNotFoundError(f"{what} {path!r}: no such checkpoint folder")
    mngr = ocp.CheckpointManager(directory, item_handlers=_item_handlers(),
                                 options=ocp.CheckpointManagerOptions(read_only=True, create=False))
    try:
        steps, explicit = sorted(mngr.all_steps()), step is not None
        step = step if step is not None else named if named is not None else mngr.latest_step()
        if step is None:
            raise FileNotFoundError(f"{what} {path!r}: no checkpoint found in {directory}")
        if step not in steps:
            asked = f"--step {step}" if explicit else f"{what} {path!r}"  # the flag that named the step
            raise FileNotFoundError(f"{asked}: no checkpoint step {step} in {directory} (steps there: {steps})")
        return directory, step, mngr.item_metadata(step)["state"].tree["params"]
    finally:
        mngr.close()


def _restore_params(directory: str, step: int, target, restore_args):
    """Restores only the `params` subtree of checkpoint `step` (the optimizer state is not read)."""
    return ocp.PyTreeCheckpointer().restore(
        storage.join(directory, str(step), "state"),
        args=ocp.args.PyTreeRestore(item={"params": target}, restore_args={"params": restore_args},
                                    partial_restore=True))["params"]


def host_params(path: str, step: int | None = None, what: str = "--workdir"):
    """The parameters of a run checkpoint as host numpy arrays, in the layout they were written in (scanned or
    not), whatever mesh wrote them (FSDP-sharded arrays are read whole); no model or data needed.

    Args:
      path: a workdir, its `checkpoints/` folder or one `checkpoints/<step>` folder, local or `gs://`.
      step: the checkpoint step; None: the one `path` names, else the newest.
      what: the flag or key `path` came from, for messages.

    Returns:
      `(params, step)`: a nested dict of numpy arrays (the checkpoint's dtypes), and the step read.

    Raises:
      FileNotFoundError: no checkpoint folder, no checkpoint, or no checkpoint `step` (listing the steps there).
    """
    directory, step, meta = _open_params(path, step, what)
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), meta)
    restore_args = jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray), meta)
    return _restore_params(directory, step, target, restore_args), step


def params_equal(a, b) -> bool:
    """True if two parameter trees have the same paths and bitwise-equal values (host copies)."""
    fa = jax.tree_util.tree_flatten_with_path(a)[0]
    fb = jax.tree_util.tree_flatten_with_path(b)[0]
    return ([path_str(p) for p, _ in fa] == [path_str(p) for p, _ in fb]
            and all(np.array_equal(np.asarray(x), np.asarray(y)) for (_, x), (_, y) in zip(fa, fb, strict=False)))
