"""`python main.py --mode=predict --workdir=RUN --images=PATH [--images=…] [--top=5] [--out=FILE.csv|FILE.json]`.

Classifies image files with a trained run (its latest checkpoint and its `config.json`; the data it trained on is not
needed: the class names come from the run's `class_names.json`), or with a published checkpoint loaded into a config's
model (`--config=… --config.init_from=FILE`, the files `--mode=analyze` reads; class names from the config's dataset).

Each image gets the run's own eval preprocessing (`pp.eval_crop_fraction` resize + centre crop, the patch
permutation of a permuted-patch run, `pp.value_range` scaling), in batches of `--predict_batch`; the top-k classes
with their softmax probabilities are printed for the first few images and written to `--out`:

- CSV: a header `path,class_1,probability_1,…,class_k,probability_k`, then one row per image, in input order;
- JSON: a list of `{"path": …, "top": [{"class": name, "label": index, "probability": p}, …]}`.

`--images` takes files, folders (every .jpg/.jpeg/.png below them, sorted) and globs (`'photos/*.jpg'`, `**` for
any depth); it repeats. An image that cannot be read or decoded stops the command with one line naming the file,
and nothing is written (the output is written to a temporary file and renamed when every image is done).
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from vit_jax_struct import storage
from vit_jax_struct.data import preprocess, sources
from vit_jax_struct.train import checkpoint, sharding, trainer

SHOWN = 5  # images whose predictions are printed


def imagenet_class_names() -> list[str]:
    """ImageNet-1k's 1,000 class names in label order (the sorted WordNet ids), each the first lemma of its synset
    (`data/imagenet_class_names.tsv`: wnid, then the synset's lemmas)."""
    path = os.path.join(os.path.dirname(sources.__file__), "imagenet_class_names.tsv")
    with open(path) as f:
        return [line.rstrip("\n").split("\t", 1)[1].split(",")[0] for line in f if line.strip()]


def find_images(specs) -> list[str]:
    """The image files named by `specs` (files, folders searched recursively, globs), in order, each once.

    Raises:
      FileNotFoundError: a spec that is neither an existing file or folder nor a glob.
      ValueError: a folder or glob without images, or no spec at all.
    """
    if not specs:
        raise ValueError("--mode=predict needs --images=PATH (a file, a folder or a glob; repeatable)")
    files = []
    for spec in specs:
        path = os.path.expanduser(str(spec))
        if os.path.isfile(path):
            found = [path]
        elif os.path.isdir(path):
            found = sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names
                           if f.lower().endswith(sources.IMAGE_EXTENSIONS) and not f.startswith("."))
        elif glob.has_magic(path):
            found = sorted(f for f in glob.glob(path, recursive=True)
                           if os.path.isfile(f) and f.lower().endswith(sources.IMAGE_EXTENSIONS))
        else:
            raise FileNotFoundError(f"--images {spec!r} does not exist (a file, a folder or a glob is allowed)")
        if not found:
            raise ValueError(f"--images {spec!r} holds no image file ({', '.join(sources.IMAGE_EXTENSIONS)})")
        files += found
    return list(dict.fromkeys(files))


class Predictor:
    """A model and its eval preprocessing, ready to classify uint8 images.

    Attributes: `config`, `class_names` (list of str, label order), `eval_pp`, `image_size`, `source` (what was
    loaded: `RUN step N` or the checkpoint file).
    """

    def __init__(self, config, model, variables, eval_pp, class_names, source: str):
        self.config, self.model, self.variables, self.eval_pp = config, model, variables, eval_pp
        self.class_names, self.source = list(class_names), source
        self.image_size = int(config.data.image_size)
        value_range = tuple(config.pp.get("value_range", (-1.0, 1.0)))

        @jax.jit
        def probabilities(variables, images):
            logits, _ = model.apply(variables, preprocess.to_value_range(images, value_range, jnp), train=False)
            return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)

        self._probabilities = probabilities

    def preprocess(self, path: str) -> np.ndarray:
        """uint8 `[S, S, 3]` of the image file at `path` (the run's eval preprocessing).

        Raises:
          ValueError: the file cannot be read or decoded (naming it).
        """
        try:
            data = storage.read_bytes(path)
        except OSError as e:
            raise ValueError(f"cannot read image file {path!r}: {type(e).__name__}: {e}") from e
        image = sources.decode_image(data, path)
        return np.asarray(self.eval_pp({"image": image, "label": 0})["image"], np.uint8)

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """Softmax probabilities `[B, C]` float32 of uint8 images `[B, S, S, 3]` (already preprocessed)."""
        return np.asarray(self._probabilities(self.variables, jnp.asarray(images)))


def _one_device(config):
    config = ml_collections.ConfigDict(config.to_dict())
    config.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=1))
    config.batch_size = config.eval_batch_size = 1
    config.accum_steps = 1
    return config


def load(workdir: str | None, config=None) -> Predictor:
    """The predictor of run `workdir` (its latest checkpoint; `config`, if given, instead of its `config.json`), or,
    when `workdir` holds no checkpoint and `config.init_from` is set, of that checkpoint file in `config`'s model.

    Raises:
      FileNotFoundError: neither a checkpoint in `workdir/checkpoints` nor `config.init_from`; no config.json.
      ValueError: a checkpoint that does not match the model.
    """
    from vit_jax_struct.analysis import run as analysis_run

    if workdir and analysis_run.has_checkpoint(workdir):
        if config is None:
            path = storage.join(workdir, "config.json")
            if not storage.exists(path):
                raise FileNotFoundError(f"{path} not found: pass --config for a run without config.json")
            config = ml_collections.ConfigDict(json.loads(storage.read_text(path)))
        config = _one_device(config)
        names_path = storage.join(workdir, trainer.CLASS_NAMES)
        names = json.loads(storage.read_text(names_path)) if storage.exists(names_path) else None
        num_classes = len(names) if names else int(config.data.get("num_classes") or 0)
        if not num_classes:
            raise FileNotFoundError(f"{names_path} not found and the config has no data.num_classes: the number of "
                                    "classes of the run is unknown")
        mesh = sharding.create_mesh(config.mesh, jax.devices()[:1])
        parts = trainer.build_model(config, num_classes, config.total_steps, mesh)
        ckpt = checkpoint.Checkpointer(storage.join(workdir, "checkpoints"), read_only=True)
        try:
            step = ckpt.latest_step()
            state = ckpt.restore(step, parts["abstract_state"])
        finally:
            ckpt.close()
        return Predictor(config, parts["model"], trainer.model_variables(state), parts["eval_pp"],
                         names or [str(i) for i in range(num_classes)], f"{workdir} step {step}")
    if config is not None and config.get("init_from"):
        config = _one_device(config)
        num_classes = int(config.data.get("num_classes") or 0)
        if not num_classes:
            raise ValueError("--mode=predict with --config.init_from needs config.data.num_classes (the classes of "
                             "the checkpoint's head, e.g. 1000 for an ImageNet-1k fine-tuned file)")
        mesh = sharding.create_mesh(config.mesh, jax.devices()[:1])
        parts = trainer.build_model(config, num_classes, config.total_steps, mesh)
        # No data is read: the published head's classes are the checkpoint's (`init_reinit=""` keeps the head).
        with config.unlocked():
            config.init_reinit = ""
        config, parts, variables, _ = analysis_run.load_checkpoint_file(config, parts)
        names = imagenet_class_names() if num_classes == 1000 else [str(i) for i in range(num_classes)]
        return Predictor(config, parts["model"], variables, parts["eval_pp"], names, str(config.init_from))
    where = storage.join(workdir, "checkpoints") if workdir else "(no --workdir)"
    raise FileNotFoundError(f"no checkpoint in {where}: give --workdir=RUN of a trained run, or --config=FILE.py "
                            "--config.init_from=CHECKPOINT for a published model")


def predict(predictor: Predictor, files: list[str], top: int = 5, batch: int = 64, progress: bool | None = None):
    """Yields `(path, [(label, probability), …])` for every file in order, the top `top` classes by probability.

    Raises:
      ValueError: `top` or `batch` < 1; an image that cannot be read or decoded (naming it).
    """
    if top < 1 or batch < 1:
        raise ValueError(f"--top {top} and --predict_batch {batch} must be ≥ 1")
    top = min(top, len(predictor.class_names))
    show_progress = len(files) > 300 if progress is None else progress
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(files), unit="img", file=sys.stderr, desc="predict")
    try:
        for i in range(0, len(files), batch):
            chunk = files[i:i + batch]
            images = np.stack([predictor.preprocess(f) for f in chunk])
            n = len(chunk)
            if n < batch and i > 0:  # the last batch padded to the compiled shape (one program for all batches)
                images = np.concatenate([images, np.zeros((batch - n, *images.shape[1:]), np.uint8)])
            probs = predictor.probabilities(images)[:n]
            order = np.argsort(-probs, axis=-1, kind="stable")[:, :top]
            for path, p, idx in zip(chunk, probs, order, strict=True):
                yield path, [(int(k), float(p[k])) for k in idx]
            if bar is not None:
                bar.update(n)
    finally:
        if bar is not None:
            bar.close()


def _format_row(names, path, top) -> str:
    return f"{path}: " + ", ".join(f"{names[k]} {p:.3f}" for k, p in top)


def write(rows, out: str, names, top: int) -> None:
    """Writes `rows` (`(path, [(label, probability)])`) to `out` (.csv or .json) through a temporary file."""
    tmp = f"{out}.partial-{os.getpid()}"
    try:
        if out.endswith(".json"):
            data = [{"path": path, "top": [{"class": names[k], "label": k, "probability": p} for k, p in t]}
                    for path, t in rows]
            text = json.dumps(data, indent=1)
        else:
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(["path"] + [f"{c}_{j}" for j in range(1, top + 1) for c in ("class", "probability")])
            for path, t in rows:
                w.writerow([path] + [v for k, p in t for v in (names[k], f"{p:.6f}")])
            text = buf.getvalue()
        storage.write_text(tmp, text)
        storage.move(tmp, out)
    finally:
        if storage.exists(tmp):
            storage.remove(tmp)


def run_from_flags(workdir, config, images, top: int, out: str | None, batch: int) -> list:
    """Entry of `main.py --mode=predict`: prints the first predictions and a summary line; writes `out`.

    Raises:
      FileNotFoundError, ValueError: see `find_images`, `load`, `predict`; an `out` that is neither .csv nor .json.
    """
    if out and not out.endswith((".csv", ".json")):
        raise ValueError(f"--out {out!r} must end in .csv or .json")
    files = find_images(images)
    predictor = load(workdir, config)
    t0 = time.time()
    rows = []
    for row in predict(predictor, files, top, batch):
        rows.append(row)
        if len(rows) <= SHOWN:
            print(_format_row(predictor.class_names, *row), flush=True)
    if len(rows) > SHOWN:
        print(f"… {len(rows) - SHOWN} more", flush=True)
    if out:
        write(rows, out, predictor.class_names, min(top, len(predictor.class_names)))
    logging.info("predict: %d images with %s in %.1f s%s", len(rows), predictor.source, time.time() - t0,
                 f"; top-{top} written to {out}" if out else "")
    return rows
