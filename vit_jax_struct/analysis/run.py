"""`python main.py --mode=analyze --workdir=RUN [--compare=OTHER_RUN]`: restore a run, measure, plot, report.

Restores the latest checkpoint of `RUN` (its `config.json` is the config unless `--config` is given), feeds
`--analysis_examples` examples of the eval split (the run's own preprocessing, patch permutation included) through
the model, and writes into `RUN/analysis/`:

- `analysis.json`: every number below;
- `cka.png`: minibatch linear CKA layer × layer (batches of `--analysis_batch`, Nguyen et al. 2021), and
  `cka_vs_<other>.png` across two models when `--compare` is given (the same images go to both);
- `attention_distance.png`: mean attention distance per head, heads sorted per block (Raghu et al. Fig. 3);
- `posemb_similarity.png`: cosine-similarity maps of the learned posemb (Jelassi et al. Fig. 1), re-indexed by
  π⁻¹ for a run on permuted patches, with the locality score;
- `localization.png`: CKA of output tokens with input patches (Raghu et al. §6);
- `probes.png`: per-layer ridge probes (k-shot and full) on the CLS token and the mean of patch tokens (and, in
  the JSON, one probe per token position of the last block);
- `skip_norms.png`: ‖z‖/‖f(z)‖ per block for the MHSA and MLP branches, CLS vs patch tokens (Raghu et al. §5);
- `report.md`: one page linking the plots, with the numbers.
"""

from __future__ import annotations

import json
import os

import jax
import ml_collections
import numpy as np
from absl import logging

from vit_jax_struct.analysis import attention, cka, localization, norms, plots, posemb, probes
from vit_jax_struct.data import permute, pipeline, preprocess, sources
from vit_jax_struct.models import vit
from vit_jax_struct.train import checkpoint, trainer


def load_run(workdir: str, config=None):
    """`(config, parts, variables)` of a run's latest checkpoint (parameters + model state), on one device.

    Raises:
      FileNotFoundError: no config.json (and no config given) or no checkpoint.
    """
    if config is None:
        path = os.path.join(workdir, "config.json")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found: pass --config for a run without config.json")
        with open(path) as f:
            config = ml_collections.ConfigDict(json.load(f))
    config = ml_collections.ConfigDict(config.to_dict())
    config.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=1))
    config.batch_size = config.eval_batch_size = 1  # analysis batches its own data
    config.accum_steps = 1
    config.data.eval_examples = 0  # the whole eval split to draw from, whatever training evaluated on
    parts = trainer.build(config)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
    step = ckpt.latest_step()
    if step is None:
        raise FileNotFoundError(f"no checkpoint in {ckpt.directory}")
    state = ckpt.restore(step, parts["abstract_state"])
    ckpt.close()
    if config.model.get("scan"):
        # The analyses read blocks by name (`encoderblock_<i>` intermediates): run the unscanned model on the
        # converted parameters (same function; remat changes nothing at inference).
        config.model.scan, config.model.remat_policy = False, "none"
        parts = trainer.build(config)
        state = {**state, "params": vit.unstack_blocks(state["params"])}
    logging.info("analysis: restored %s step %d", workdir, step)
    return config, parts, trainer.model_variables(state), step


def _layers(out: dict) -> list[str]:
    return ["stem", *sorted(k for k in out if k.startswith("block") and "/" not in k)]


def _features(x):
    """Per-example representation: `[B, N, D]` tokens or `[B, h, w, C]` maps, float32 numpy."""
    return np.asarray(x, np.float32)


def _batches(parts, n: int, batch: int, split_source=None):
    src = sources.evenly_spaced(split_source or parts["eval_source"], n)
    for b in pipeline.eval_batches(src, parts["eval_pp"], batch):
        keep = b["mask"] > 0
        yield preprocess.to_value_range(b["image"][keep], parts["value_range"]), b["label"][keep]


def analyze(workdir: str, compare: str | None = None, config=None, num_examples: int = 1024,
            batch: int = 256, probe_train_examples: int = 2000, seed: int = 0) -> dict:
    """Runs every analysis that applies to the model of `workdir`; returns the numbers also written to JSON."""
    config, parts, variables, step = load_run(workdir, config)
    model = parts["model"]
    is_vit = config.model.get("name", "vit") == "vit"
    out_dir = os.path.join(workdir, "analysis")
    os.makedirs(out_dir, exist_ok=True)
    apply = jax.jit(lambda v, x: model.apply(v, x, return_attention=is_vit, mutable=["intermediates"]))
    other = None
    if compare:
        _o_config, o_parts, o_vars, _ = load_run(compare)
        o_apply = jax.jit(o_parts["model"].apply)
        other = (os.path.basename(os.path.normpath(compare)), o_vars, o_apply)

    results = {"workdir": workdir, "step": step, "model": dict(config.model), "examples": 0}
    grid = patch = None
    if is_vit:
        patch = model.arch()["patch_size"]
        grid = (config.data.image_size // patch,) * 2
    has_cls = is_vit and config.model.get("classifier", "token") == "token"
    within, across = cka.MinibatchCKA(), cka.MinibatchCKA()
    dist = attention.AttentionDistance(grid, patch, has_cls) if is_vit else None
    loc = localization.Localization(patch) if is_vit else None
    ratio_sums, n_batches = {}, 0
    layer_names = other_names = None
    for images, _ in _batches(parts, num_examples, batch):
        if len(images) < 4:
            continue
        (_, out), inter = apply(variables, images)
        layer_names = layer_names or _layers(out)
        feats = [_features(out[k]) for k in layer_names]
        within.update(feats)
        if other is not None:
            _, o_out = other[2](other[1], images)
            other_names = other_names or _layers(o_out)
            across.update(feats, [_features(o_out[k]) for k in other_names])
        if is_vit:
            dist.update(out)
            last = np.asarray(out[layer_names[-1]])
            loc.update(last[:, 1:] if has_cls else last, images)
            for k, v in norms.norm_ratios(inter["intermediates"], has_cls).items():
                ratio_sums[k] = ratio_sums.get(k, 0.0) + v
        n_batches += 1
        results["examples"] += len(images)
    if not n_batches:
        raise ValueError(f"no analysis batch of ≥ 4 examples (num_examples={num_examples}, batch={batch})")

    results["cka"] = {"layers": layer_names, "matrix": within.result().tolist()}
    plots.heatmap(within.result(), layer_names, layer_names, f"CKA within {os.path.basename(workdir)}",
                  os.path.join(out_dir, "cka.png"))
    if other is not None:
        results["cka_across"] = {"other": compare, "layers": layer_names, "other_layers": other_names,
                                 "matrix": across.result().tolist()}
        plots.heatmap(across.result(), layer_names, other_names, f"CKA: {os.path.basename(workdir)} vs {other[0]}",
                      os.path.join(out_dir, f"cka_vs_{other[0]}.png"))
    if is_vit:
        d = dist.result()
        results["attention_distance_pixels"] = {k: v.tolist() for k, v in d.items()}
        plots.attention_distance(d, os.path.join(out_dir, "attention_distance.png"))
        m, frac = loc.result()
        results["localization"] = {"matrix": m.tolist(), "own_patch_fraction": frac}
        plots.localization(m, grid, os.path.join(out_dir, "localization.png"),
                           f"token–patch CKA ({config.model.get('classifier')}); own patch best for {frac:.0%}")
        results["skip_norm_ratios"] = {k: v / n_batches for k, v in ratio_sums.items()}
        plots.skip_norms(results["skip_norm_ratios"], os.path.join(out_dir, "skip_norms.png"))
        if config.model.get("posemb", "learn") == "learn":
            pe = posemb.posemb_patches(variables["params"], has_cls)
            perm = permute.load_permutation(workdir)
            raw_score = posemb.locality_score(pe, grid)
            if perm is not None:
                pe = posemb.reindex(pe, perm["inverse"])
            results["posemb"] = {"locality_spearman": posemb.locality_score(pe, grid),
                                 "locality_spearman_token_order": raw_score, "reindexed_by_inverse_permutation":
                                 perm is not None}
            plots.posemb_similarity(posemb.cosine_similarity(pe), grid, os.path.join(out_dir, "posemb_similarity.png"),
                                    f"posemb cosine similarity{' (π⁻¹ re-indexed)' if perm is not None else ''}; "
                                    f"locality {results['posemb']['locality_spearman']:.2f}")
    results["probes"] = _probe_layers(parts, apply, variables, layer_names, has_cls, is_vit, num_examples,
                                      probe_train_examples, batch, seed)
    plots.probes(results["probes"], os.path.join(out_dir, "probes.png"))
    with open(os.path.join(out_dir, "analysis.json"), "w") as f:
        json.dump(results, f, indent=1)
    plots.report(results, out_dir)
    return results


def _pooled(x, is_vit: bool, has_cls: bool) -> dict:
    x = np.asarray(x, np.float32)
    if x.ndim == 4:  # CNN maps [B, h, w, C]: global average pool
        return {"gap": x.mean(axis=(1, 2))}
    if x.ndim == 2:
        return {"gap": x}
    out = {"patch_mean": (x[:, 1:] if has_cls else x).mean(1)}
    if has_cls:
        out["cls"] = x[:, 0]
    return out


def _probe_layers(parts, apply, variables, layer_names, has_cls, is_vit, num_examples, n_train, batch, seed):
    train_src = sources.evenly_spaced(parts["train_source"], n_train)
    feats = {}
    for split, src, n in (("train", train_src, n_train), ("test", parts["eval_source"], num_examples)):
        labels = []
        for images, y in _batches(parts, n, batch, src):
            (_, out), _ = apply(variables, images)
            for layer in layer_names:
                for kind, f in _pooled(out[layer], is_vit, has_cls and layer != "stem").items():  # stem: no CLS
                    feats.setdefault((layer, kind, split), []).append(f)
            last = np.asarray(out[layer_names[-1]], np.float32)
            if last.ndim == 3:  # per-token probes on the last block: one probe per token position
                for t in range(last.shape[1]):
                    feats.setdefault((layer_names[-1], f"token{t:02d}", split), []).append(last[:, t])
            labels.append(y)
        feats[("labels", split)] = np.concatenate(labels)
    result = {}
    k = parts["num_classes"]
    for layer in layer_names:
        for kind in sorted({kk for (lay, kk, s) in [key for key in feats if len(key) == 3] if lay == layer}):
            tr = np.concatenate(feats[(layer, kind, "train")])
            te = np.concatenate(feats[(layer, kind, "test")])
            result[f"{layer}/{kind}"] = probes.probe(tr, feats[("labels", "train")], te, feats[("labels", "test")], k,
                                                     shots=(1, 5, 10, 25, 0), seed=seed)
    return result


def run_from_flags(workdir: str, compare: str | None, config, num_examples: int, batch: int):
    """Entry for `main.py --mode=analyze` (one process)."""
    if jax.process_count() > 1:
        raise ValueError("--mode=analyze runs on one process; run it on one host")
    res = analyze(workdir, compare, config, num_examples, batch)
    logging.info("analysis written to %s", os.path.join(workdir, "analysis"))
    return res
