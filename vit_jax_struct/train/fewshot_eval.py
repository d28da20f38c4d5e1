"""Few-shot evaluation during training (`config.fewshot`), as big_vision's `fewshot` evaluator.

Every `config.fewshot.every_steps` steps (and at the last step) the trainer calls `FewShotEvaluator.run(variables)`:
the frozen `pre_logits` features `[N, D]` of `train_examples` train images (evenly spread over the train split) and
`test_examples` test images of each dataset are computed with the model in eval mode, and
`vit_jax_struct.fewshot.few_shot` fits closed-form ridge regressions on {−1, +1} targets from k shots per class
(k in `shots`), with λ from `l2_grid` chosen on `holdout_examples` held-out train images, over `repeats` shot draws.
Logged through the trainer's writer as `fewshot/<name>_<k>shot` (mean test accuracy over the draws).

Config (`configs/common.py:base()`):
    fewshot.every_steps       0: off
    fewshot.shots             (1, 5, 10, 25)
    fewshot.repeats           shot draws per k (seeds config.seed, config.seed + 1, …)
    fewshot.l2_grid           λ candidates (2^-10 … 2^10)
    fewshot.train_examples    train images features are computed for (shots and held-out examples come from them)
    fewshot.holdout_examples  of those, kept for choosing λ
    fewshot.test_examples     test images (0: the whole split)
    fewshot.datasets          {name: {source, name, root, train_split, test_split}}: keys not given are the run's
                              `config.data` ones; empty: the run's own data only, named `data.name`, else the
                              image folder's base name, else `data.source`.

Raises (at construction): ValueError for a dataset entry with unknown keys or a source that cannot be read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vit_jax_struct import fewshot, storage
from vit_jax_struct.data import pipeline, preprocess, sources
from vit_jax_struct.train import sharding

DATASET_KEYS = ("source", "name", "root", "train_split", "test_split")


def own_name(data) -> str:
    """The name of the run's own data in the `fewshot/<name>_<k>shot` keys."""
    if data.get("name"):
        return data.name
    if data.source == "folder" and data.get("root"):
        return storage.basename(data.root.rstrip("/")) or "folder"
    return data.source


def dataset_specs(config) -> dict:
    """`{name: data ConfigDict with train_split, eval_split}` of every few-shot dataset.

    Raises:
      ValueError: a dataset entry with a key outside `DATASET_KEYS`.
    """
    fs = config.fewshot
    entries = dict(fs.get("datasets") or {})
    if not entries:
        entries = {own_name(config.data): {}}
    out = {}
    for name, raw in entries.items():
        entry = dict(raw or {})
        bad = set(entry) - set(DATASET_KEYS)
        if bad:
            raise ValueError(f"config.fewshot.datasets.{name} has unknown keys {sorted(bad)}; allowed: "
                             f"{DATASET_KEYS}")
        d = ml_collections.ConfigDict(config.data.to_dict())
        for k in ("source", "name", "root", "train_split"):
            if k in entry:
                d[k] = entry[k]
        d.eval_split = entry.get("test_split", config.data.eval_split)
        out[name] = d
    return out


class FewShotEvaluator:
    """Pre-logits features + ridge few-shot accuracy for every dataset of `config.fewshot` (see the module doc)."""

    def __init__(self, config, model, eval_pp, mesh, variables_sharding, per_host_batch: int):
        fs = config.fewshot
        self.shots, self.repeats = tuple(int(k) for k in fs.shots), int(fs.repeats)
        self.l2_grid, self.seed = tuple(float(x) for x in fs.l2_grid), int(config.seed)
        self.holdout = int(fs.holdout_examples)
        self.mesh = mesh
        self.sets = {}
        self._batches = {}  # name -> (train, test) pipeline.CachedEvalBatches: decoded once, reused by every pass
        for name, d in dataset_specs(config).items():
            decoder = config.pp.get("jpeg_decoder", "pillow")
            train = sources.get_source(d, d.train_split, jpeg_decoder=decoder)
            test = sources.get_source(d, d.eval_split, getattr(train, "class_names", None), jpeg_decoder=decoder)
            self.sets[name] = (sources.evenly_spaced(train, int(fs.train_examples)),
                               sources.evenly_spaced(test, int(fs.test_examples)), train.num_classes)
            self._batches[name] = tuple(
                pipeline.CachedEvalBatches(src, eval_pp, per_host_batch, jax.process_index(), jax.process_count())
                for src in self.sets[name][:2])
        value_range = preprocess.input_scaling(config.pp)

        def features(variables, batch):
            images = preprocess.to_value_range(batch["image"], value_range, jnp)
            _, out = model.apply(variables, images, train=False)
            return out["pre_logits"].astype(jnp.float32), batch["label"], batch["mask"]

        batch_sh = NamedSharding(mesh, sharding.BATCH_SPEC)
        self._features = jax.jit(features, in_shardings=(variables_sharding, batch_sh),
                                 out_shardings=NamedSharding(mesh, P()))  # replicated: every host gets them all

    def features(self, variables, batches) -> tuple[np.ndarray, np.ndarray]:
        """Pre-logits `[N, D]` float32 and labels `[N]` int of every example of `batches` (padded host batches of
        `pipeline.eval_batches`, e.g. a `pipeline.CachedEvalBatches`; padding dropped)."""
        xs, ys = [], []
        for batch in batches:
            x, y, m = jax.device_get(self._features(variables, sharding.global_batch(batch, self.mesh)))
            keep = np.asarray(m) > 0
            xs.append(np.asarray(x)[keep])
            ys.append(np.asarray(y)[keep])
        return np.concatenate(xs), np.concatenate(ys)

    def run(self, variables) -> dict:
        """`{"fewshot/<name>_<k>shot": mean test accuracy over the shot draws}` for every dataset and k."""
        out = {}
        for name, (_, _, num_classes) in self.sets.items():
            train, test = self._batches[name]
            tr_x, tr_y = self.features(variables, train)
            te_x, te_y = self.features(variables, test)
            res = fewshot.few_shot(tr_x, tr_y, te_x, te_y, num_classes, shots=self.shots, repeats=self.repeats,
                                   seed=self.seed, holdout=self.holdout, l2_grid=self.l2_grid)
            for k in self.shots:
                out[f"fewshot/{name}_{k}shot"] = res[str(k)]
            logging.info("few-shot %s: %s", name, ", ".join(f"{k}-shot {res[str(k)]:.4f}" for k in self.shots))
        return out
