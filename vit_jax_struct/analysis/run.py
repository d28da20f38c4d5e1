"""`python main.py --mode=analyze --workdir=RUN [--compare=OTHER_RUN]`: restore a run, measure, plot, report.

Or, without any training run, `--config=… --config.init_from=FILE.npz [--compare_config=… --compare_init_from=…]`:
the model the config builds, loaded from a published ViT or BiT checkpoint file (`load_checkpoint_file`;
docs/published_models.md). Either way the analysis restores the latest checkpoint of `RUN` (its `config.json` is the
config unless `--config` is given) or loads the file, feeds
`--analysis_examples` examples of the eval split (the run's own preprocessing, patch permutation included) through
the model, and writes into `RUN/analysis/`:

- `analysis.json`: every number below;
- `cka.png`: minibatch linear CKA layer × layer (batches of `--analysis_batch`, Nguyen et al. 2021), and
  `cka_vs_<other>.png` across two models when `--compare` is given (the same images go to both);
- `attention_distance.png`: mean attention distance per head, heads sorted per block (Raghu et al. Fig. 3);
- `posemb_similarity.png`: cosine-similarity maps of the learned posemb (Jelassi et al. Fig. 1), re-indexed by
  π⁻¹ for a run on permuted patches, with the locality score; for such a run also
  `posemb_similarity_token_order.png`, the same maps in token order (as trained, not re-indexed);
- `localization.png`: CKA of output tokens with input patches (Raghu et al. §6);
- `probes.png`: per-layer ridge probes (k-shot and full) on the CLS token and the mean of patch tokens (and, in
  the JSON, one probe per token position of the last block: all positions up to 17, else CLS + 16 spread evenly);
- `skip_norms.png`: ‖z‖/‖f(z)‖ per block for the MHSA and MLP branches, CLS vs patch tokens (Raghu et al. §5);
- `norm_outliers.png`: high-norm patch tokens (Darcet et al. 2024): the norm distribution per block, the fraction
  above the fixed (`--outlier_norm`, 150 as the paper) and the robust (median + k·1.4826·MAD, `--outlier_mad_k`)
  thresholds, where the last block's outliers sit, their patch embeddings' cosine similarity to the 4 neighbours and
  linear position probes on outlier vs normal tokens (`analysis/outliers.py`);
- `last_block_grams.npz`: the Gram matrices of the last encoder block on the same batches, with their labels
  (`save_last_block_grams`), so the last-block CKA of two runs (R7/R8) can be computed later from these files
  alone, e.g. across sessions when neither run keeps a checkpoint (`stored_cka_across`);
- `report.md`: one page linking the plots, with the numbers.
"""

from __future__ import annotations

import io
import json
import os
import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from vit_jax_struct import storage
from vit_jax_struct.analysis import attention, cka, localization, norms, outliers, plots, posemb, probes
from vit_jax_struct.data import permute, pipeline, preprocess, sources
from vit_jax_struct.models import official, vit
from vit_jax_struct.train import checkpoint, trainer

MAX_TOKEN_PROBES = 17  # CLS + 16 patch positions of the last block get their own probe (all of them if fewer)


def load_run(workdir: str, config=None):
    """`(config, parts, variables)` of a run's latest checkpoint (parameters + model state), on one device.

    Raises:
      FileNotFoundError: no config.json (and no config given) or no checkpoint.
    """
    if config is None:
        path = storage.join(workdir, "config.json")
        if not storage.exists(path):
            raise FileNotFoundError(f"{path} not found: pass --config for a run without config.json")
        config = ml_collections.ConfigDict(json.loads(storage.read_text(path)))
    config = ml_collections.ConfigDict(config.to_dict())
    config.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=1))
    config.batch_size = config.eval_batch_size = 1  # analysis batches its own data
    config.accum_steps = 1
    config.data.eval_examples = 0  # the whole eval split to draw from, whatever training evaluated on
    parts = trainer.build(config)
    ckpt = checkpoint.Checkpointer(storage.join(workdir, "checkpoints"), read_only=True)
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


def _analysis_config(config):
    """A copy of `config` for inference on one device: batch sizes 1 (analysis batches its own data), the whole
    eval split to draw from, and an unscanned encoder without remat (the analyses read blocks by name)."""
    config = ml_collections.ConfigDict(config.to_dict())
    config.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=1))
    config.batch_size = config.eval_batch_size = 1
    config.accum_steps = 1
    config.data.eval_examples = 0
    if config.model.get("scan"):
        config.model.scan = False
    if "remat_policy" in config.model:
        config.model.remat_policy = "none"
    return config


def load_checkpoint_file(config, parts=None):
    """`(config, parts, variables, 0)` for `config.init_from`: a published `.npz` (ViT layouts of
    `models/official.py`, BiT of `models/bit.py`; local path or URL, read through `etils.epath`) or another run's
    checkpoint folder, loaded into the model `config.model` builds — no training run, no workdir checkpoint.

    Parameters matching `config.init_reinit` (default: the head, whose size the published files fix at 21,843 or
    1,000 classes) keep a fresh init; only those are initialised (the rest of the init is dead code under jit).
    `parts`: the model half of the run (`trainer.build_model`, on one device) when no data is to be read; default
    `trainer.build(config)` (the config's data too).

    Raises:
      FileNotFoundError: the file cannot be read.
      ValueError: the file does not match the model (every unused, missing and mis-shaped key listed).
    """
    config = _analysis_config(config)
    parts = trainer.build(config) if parts is None else parts
    model, abstract = parts["model"], parts["abstract_state"]["params"]
    path = str(config.init_from)
    npz = official.is_weights_file(path)
    options = checkpoint.official_options(config, model) if npz else None
    init = None
    if npz and options.get("reinit"):
        rx = re.compile(options["reinit"])
        dummy = jnp.zeros((1, config.data.image_size, config.data.image_size, 3), jnp.float32)
        keep = lambda tree: {k: v for k, v in official.flatten(tree).items() if rx.search(k)}
        fresh = jax.jit(lambda key: keep(model.init(key, dummy)["params"]))(jax.random.key(config.seed))
        init = official.unflatten({k: fresh.get(k, v) for k, v in official.flatten(abstract).items()})
    params, step = checkpoint.load_params(path, abstract, init, options)
    logging.info("analysis: loaded %s into %s (%s)", path, config.model.get("name", "vit"),
                 config.model.get("variant", config.model.get("depth", "")))
    return config, parts, {"params": params}, step


def _layers(out: dict) -> list[str]:
    return ["stem", *sorted(k for k in out if k.startswith("block") and "/" not in k)]


def _gram(x):
    """`[B, ...]` -> linear-kernel Gram `[B, B]` float32 (full-precision matmul), inside jit."""
    x = x.reshape(x.shape[0], -1).astype(jnp.float32)
    return jnp.matmul(x, x.T, precision=jax.lax.Precision.HIGHEST)


def _pooled(x, has_cls: bool) -> dict:
    """One vector per example for the probes: GAP of CNN maps, the CLS token and the mean of patch tokens."""
    x = x.astype(jnp.float32)
    if x.ndim == 4:  # CNN maps [B, h, w, C]: global average pool
        return {"gap": x.mean(axis=(1, 2))}
    if x.ndim == 2:
        return {"gap": x}
    out = {"patch_mean": (x[:, 1:] if has_cls else x).mean(1)}
    if has_cls:
        out["cls"] = x[:, 0]
    return out


def token_positions(n_tokens: int, limit: int = MAX_TOKEN_PROBES) -> list[int]:
    """Token positions of the last block that get their own probe: all of them up to `limit`, else position 0 (CLS
    or the first patch) and `limit − 1` positions spread evenly over the rest (bounded memory at 197+ tokens)."""
    if n_tokens <= limit:
        return list(range(n_tokens))
    return [0, *np.linspace(1, n_tokens - 1, limit - 1).round().astype(int).tolist()]


def make_summaries(model, *, is_vit: bool, has_cls: bool, grid=None, patch=None, grams_only: bool = False,
                   probes_only: bool = False):
    """Jitted `(variables, images [B, H, W, 3]) -> dict` of per-batch summaries, so that no layer's `[B, N, D]`
    features (nor the `[B, heads, N, N]` attention) ever leave the device:

    - `layers`: names (static, from the model's `out`); `grams` `[L, B, B]` float32 (CKA);
    - `pooled`: `{(layer, kind): [B, D]}` probe features; `tokens` `[B, T, D]` at `token_positions`;
    - ViT only: `distance` `{block: [heads]}` summed over the batch (pixels); `norm_ratios` `{key: scalar}`;
      `loc_token_grams` / `loc_patch_grams` `[N, B, B]` (localization CKA); `token_norms` `{block: [B, N]}` patch-token
      norms, `neighbour_cosine` `[B, N]` and `patch_tokens` `[B, N, D]` (the last block's, copied to the host for the
      first `NormOutliers.probe_images` images only) for the high-norm token analysis (`analysis/outliers.py`).

    `probes_only=True` returns `pooled` and `tokens` only (the probes' train split); `grams_only=True` returns
    `grams` only (the second model of a cross-model CKA). `names` (second value of a call) holds `layers` and
    `token_positions`.
    """
    names = {}

    def fn(variables, images):
        (_, out), inter = model.apply(variables, images, return_attention=is_vit and not (probes_only or grams_only),
                                      mutable=["intermediates"])
        layers = _layers(out)
        names["layers"] = layers
        if grams_only:
            return {"grams": jnp.stack([_gram(out[k]) for k in layers])}
        res = {"pooled": {}}
        for k in layers:
            for kind, f in _pooled(out[k], has_cls and k != "stem").items():  # stem: no CLS
                res["pooled"][f"{k}/{kind}"] = f
        last = out[layers[-1]]
        if last.ndim == 3:  # per-token probes on the last block
            pos = token_positions(last.shape[1])
            names["token_positions"] = pos
            res["tokens"] = last[:, jnp.asarray(pos)].astype(jnp.float32)
        if probes_only:
            return res
        res["grams"] = jnp.stack([_gram(out[k]) for k in layers])
        if is_vit:
            res["distance"] = {k.split("/", 1)[1]: attention.mean_attention_distance(
                w, grid, patch, has_cls, xp=jnp) * w.shape[0] for k, w in out.items() if k.startswith("attention/")}
            res["norm_ratios"] = norms.norm_ratios(inter["intermediates"], has_cls, xp=jnp,
                                                   num_registers=int(getattr(model, "num_registers", 0) or 0))
            tokens = (last[:, 1:] if has_cls else last).astype(jnp.float32)  # [B, N, D] patch tokens
            res["token_norms"] = {k: outliers.token_norms(out[k][:, 1:] if has_cls else out[k], xp=jnp)
                                  for k in layers if k != "stem"}  # [B, N] per block, patch tokens only
            res["neighbour_cosine"] = outliers.neighbour_cosine(out["stem"], grid, xp=jnp)  # [B, N]
            res["patch_tokens"] = tokens
            b, h, w_, c = images.shape
            pch = images.reshape(b, h // patch, patch, w_ // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
            pch = pch.reshape(b, (h // patch) * (w_ // patch), patch * patch * c).astype(jnp.float32)
            hi = jax.lax.Precision.HIGHEST
            res["loc_token_grams"] = jnp.einsum("bnd,cnd->nbc", tokens, tokens, precision=hi)
            res["loc_patch_grams"] = jnp.einsum("bnd,cnd->nbc", pch, pch, precision=hi)
        return res

    jitted = jax.jit(fn)

    def call(variables, images):
        res = jitted(variables, images)
        return res, names

    return call


def _batches(parts, n: int, batch: int, split_source=None):
    src = sources.evenly_spaced(split_source or parts["eval_source"], n)
    for b in pipeline.eval_batches(src, parts["eval_pp"], batch):
        keep = b["mask"] > 0
        yield preprocess.to_value_range(b["image"][keep], parts["value_range"]), b["label"][keep]


def _same_images(parts) -> bool:
    tr, ev = parts["train_source"], parts["eval_source"]
    return getattr(tr, "paths", None) is not None and getattr(tr, "paths", None) == getattr(ev, "paths", None)


def cross_cka(workdir: str, compare: str, num_examples: int = 1024, batch: int = 256) -> dict:
    """Linear CKA (minibatch unbiased HSIC, as Raghu et al. 2021 §3) of every layer of the run `workdir` with every
    layer of the run `compare` (e.g. a ViT and a ResNet: R1), on the same `num_examples` evaluation images of
    `workdir`'s data and preprocessing, in batches of `batch` (≥ 4 examples each).

    Written to `workdir/analysis/cross_cka/<basename(compare)>.json` and `.png` (rows: `workdir`'s layers, columns:
    `compare`'s), beside — never into — `analysis.json`, whose `cka_across` holds another comparison (R7/R8).
    Returns `{"workdir", "other", "step", "other_step", "examples", "layers", "other_layers", "matrix",
    "other_model"}` with `matrix` `[len(layers), len(other_layers)]` floats in [0, 1] and "other_model" the other
    run's `model.name`.

    Raises:
      FileNotFoundError: either run lacks config.json or a checkpoint.
      ValueError: no batch of ≥ 4 examples.
    """
    _config, parts, variables, step = load_run(workdir)
    _o_config, o_parts, o_vars, o_step = load_run(compare)
    mine = make_summaries(parts["model"], is_vit=False, has_cls=False, grams_only=True)
    theirs = make_summaries(o_parts["model"], is_vit=False, has_cls=False, grams_only=True)
    across = cka.MinibatchCKA()
    examples, names, o_names = 0, None, None
    for images, _labels in _batches(parts, num_examples, batch):
        if len(images) < 4:  # HSIC₁ needs ≥ 4 examples
            continue
        res, names = mine(variables, images)
        o_res, o_names = theirs(o_vars, images)
        across.update_grams(np.asarray(res["grams"], np.float64), np.asarray(o_res["grams"], np.float64))
        examples += len(images)
    if not examples:
        raise ValueError(f"no cross-CKA batch of ≥ 4 examples (num_examples={num_examples}, batch={batch})")
    m = across.result()
    result = {"workdir": workdir, "other": compare, "step": step, "other_step": o_step, "examples": examples,
              "layers": list(names["layers"]), "other_layers": list(o_names["layers"]), "matrix": m.tolist(),
              "other_model": _o_config.model.get("name", "vit")}
    out_dir = storage.join(workdir, "analysis", "cross_cka")
    storage.makedirs(out_dir)
    title, other = storage.basename(workdir), storage.basename(compare)
    storage.write_text(storage.join(out_dir, f"{other}.json"), json.dumps(result, indent=1))
    plots.cross_cka(result, title, other, storage.join(out_dir, f"{other}.png"))
    return result


def analyze(workdir: str, compare: str | None = None, config=None, num_examples: int = 1024,
            batch: int = 256, probe_train_examples: int = 2000, seed: int = 0, compare_config=None,
            probes: bool = True, outlier_norm: float = outliers.DEFAULT_THRESHOLD,
            outlier_mad_k: float = outliers.DEFAULT_MAD_K) -> dict:
    """Runs every analysis that applies to the model; returns the numbers also written to `workdir/analysis/`.

    The model is the latest checkpoint of the run `workdir`, or — when `config.init_from` is set and `workdir`
    holds no checkpoint — the checkpoint file `config.init_from` (a published ViT or BiT `.npz`, see
    `load_checkpoint_file`): no training run needed. The second model of the cross-model CKA is the run `compare`
    or, with `compare_config` (its `init_from` set), a checkpoint file; it sees the same preprocessed images.

    Images stream through in batches of `batch`; per batch only Gram matrices `[L, B, B]`, per-head distances,
    norm ratios and one pooled vector per layer and example leave the device (`make_summaries`), so memory does not
    grow with the number of layers × tokens × examples (probe features: `examples × layers × kinds × D` floats).

    `probes=False` skips the per-layer linear probes (the slowest part: minutes for 100 classes on a CPU), e.g. for
    the verdict measures, which do not use them. `outlier_norm` and `outlier_mad_k` are the fixed and the robust
    (MAD multiple) thresholds of the high-norm token analysis (`analysis/outliers.py`, ViTs only).

    Raises:
      FileNotFoundError: no run checkpoint and no `config.init_from`, or unreadable files.
      ValueError: a checkpoint that does not match its model; no batch of ≥ 4 examples; `outlier_norm` or
        `outlier_mad_k` ≤ 0 (before anything is read or written).
    """
    if not (outlier_norm > 0 and outlier_mad_k > 0):
        raise ValueError(f"--outlier_norm and --outlier_mad_k must be > 0, got {outlier_norm} and {outlier_mad_k}")
    from_file = config is not None and config.get("init_from") and not has_checkpoint(workdir)
    if from_file:
        config, parts, variables, step = load_checkpoint_file(config)
    else:
        config, parts, variables, step = load_run(workdir, config)
    model = parts["model"]
    is_vit = config.model.get("name", "vit") == "vit"
    out_dir = storage.join(workdir, "analysis")
    grid = patch = None
    if is_vit:
        patch = model.arch()["patch_size"]
        grid = (config.data.image_size // patch,) * 2
    has_cls = is_vit and config.model.get("classifier", "token") == "token"
    summarize = make_summaries(model, is_vit=is_vit, has_cls=has_cls, grid=grid, patch=patch)
    other, other_label = None, None
    if compare_config is not None:
        c2 = ml_collections.ConfigDict(compare_config.to_dict())
        c2.data, c2.pp = config.data, config.pp  # the same images and classes as the first model
        _c2, o_parts, o_vars, _ = load_checkpoint_file(c2)
        name = os.path.splitext(storage.basename(c2.init_from))[0]
        o_vit = c2.model.get("name", "vit") == "vit"
        if not c2.get("init_from"):
            raise ValueError("the compare model needs a checkpoint file: --compare_init_from=PATH (or "
                             "--compare_config.init_from=PATH)")
        other = (name, o_vars, make_summaries(o_parts["model"], is_vit=o_vit, has_cls=False, grams_only=True),
                 str(c2.init_from))
    elif compare:
        _o_config, o_parts, o_vars, _ = load_run(compare)
        other = (storage.basename(compare), o_vars,
                 make_summaries(o_parts["model"], is_vit=False, has_cls=False, grams_only=True), compare)
        other_label = plots.run_label(compare, workdir)

    results = {"workdir": workdir, "step": step, "model": dict(config.model), "examples": 0}
    if from_file:
        results["checkpoint"] = str(config.init_from)
    within, across = cka.MinibatchCKA(), cka.MinibatchCKA()
    dist = attention.AttentionDistance(grid, patch, has_cls) if is_vit else None
    loc = localization.Localization(patch) if is_vit else None
    outl = outliers.NormOutliers(grid, outlier_norm, outlier_mad_k, seed=seed) if is_vit else None
    ratio_sums, n_batches, seen = {}, 0, 0
    last_grams, last_labels, last_prints = [], [], []  # the last block's Grams per batch, for later R7/R8 pairs
    layer_names = other_names = None
    probe_test, labels_test = {}, []
    for images, labels in _batches(parts, num_examples, batch):
        res, names = summarize(variables, images)
        _collect(probe_test, res)
        labels_test.append(labels)
        seen += len(images)
        if len(images) < 4:  # HSIC₁ needs ≥ 4 examples; the probes still use them
            continue
        layer_names = names["layers"]
        grams = np.asarray(res["grams"], np.float64)
        last_grams.append(grams[layer_names.index(last_block_layer(layer_names))])
        last_labels.append(np.asarray(labels))
        last_prints.append(image_fingerprint(images))
        if other is not None:
            o_res, o_names = other[2](other[1], images)
            other_names = o_names["layers"]
            across.update_grams(grams, np.asarray(o_res["grams"], np.float64))
        within.update_grams(grams)
        if is_vit:
            dist.update_sums(res["distance"], len(images))
            loc.update_grams(res["loc_token_grams"], res["loc_patch_grams"])
            for k, v in res["norm_ratios"].items():
                ratio_sums[k] = ratio_sums.get(k, 0.0) + float(v)
            outl.update(res["token_norms"], res["neighbour_cosine"], res["patch_tokens"])
        n_batches += 1
        results["examples"] += len(images)
    if not n_batches:
        raise ValueError(f"no analysis batch of ≥ 4 examples: the eval split gave {seen} example(s) "
                         f"(--analysis_examples={num_examples}, --analysis_batch={batch}); the CKA needs ≥ 4 per "
                         f"batch: analyze a split with at least 4 images")
    storage.makedirs(out_dir)
    save_last_block_grams(out_dir, last_block_layer(layer_names), last_grams, last_labels, step, last_prints)

    title = storage.basename(workdir)
    results["cka"] = {"layers": layer_names, "matrix": within.result().tolist()}
    plots.within_cka(within.result(), layer_names, title, config.model.to_dict(), storage.join(out_dir, "cka.png"))
    for name in storage.listdir(out_dir):  # a cross-model figure of an earlier analysis (another reference): stale
        if name.startswith("cka_vs_") and name.endswith(".png") and (other is None or name != f"cka_vs_{other[0]}.png"):
            storage.remove(storage.join(out_dir, name))
    if other is not None:
        results["cka_across"] = {"other": other[3], "layers": layer_names, "other_layers": other_names,
                                 "matrix": across.result().tolist()}
        plots.across_cka(results["cka_across"], title, other_label or other[0],
                         storage.join(out_dir, f"cka_vs_{other[0]}.png"))
    if is_vit:
        d = dist.result()
        results["attention_distance_pixels"] = {k: v.tolist() for k, v in d.items()}
        uniform = float(attention.grid_distances(grid, patch).mean())
        plots.attention_distance(d, storage.join(out_dir, "attention_distance.png"), uniform=uniform,
                                 local=attention.LOCAL_FRACTION * uniform)
        m, frac = loc.result()
        results["localization"] = {"matrix": m.tolist(), "own_patch_fraction": frac}
        plots.localization(m, grid, storage.join(out_dir, "localization.png"), config.model.get("classifier"), frac)
        results["skip_norm_ratios"] = {k: v / n_batches for k, v in ratio_sums.items()}
        plots.skip_norms(results["skip_norm_ratios"], storage.join(out_dir, "skip_norms.png"))
        results["norm_outliers"] = outl.result()
        plots.norm_outliers(results["norm_outliers"], storage.join(out_dir, "norm_outliers.png"))
        if config.model.get("posemb", "learn") == "learn":
            pe = posemb.posemb_patches(variables["params"], has_cls)
            perm = permute.load_permutation(workdir)
            if perm is not None and len(perm["inverse"]) != len(pe):
                # Blocks finer than the patch (a sub-patch permutation): no re-indexing of the posemb grid undoes it.
                perm = None
            raw_score = posemb.locality_score(pe, grid)
            if perm is not None:
                # The paper's contrast (Jelassi et al. §6): the maps as trained (token order) beside the re-indexed ones.
                plots.posemb_similarity(posemb.cosine_similarity(pe), grid,
                                        storage.join(out_dir, "posemb_similarity_token_order.png"),
                                        f"posemb cosine similarity in token order (not re-indexed); "
                                        f"locality {raw_score:.2f}")
                pe = posemb.reindex(pe, perm["inverse"])
            results["posemb"] = {"locality_spearman": posemb.locality_score(pe, grid),
                                 "locality_spearman_token_order": raw_score, "reindexed_by_inverse_permutation":
                                 perm is not None, "locality_null": posemb.locality_null(pe, grid)}
            plots.posemb_similarity(posemb.cosine_similarity(pe), grid, storage.join(out_dir, "posemb_similarity.png"),
                                    f"posemb cosine similarity{' (π⁻¹ re-indexed)' if perm is not None else ''}; "
                                    f"locality {results['posemb']['locality_spearman']:.2f}")
    if not probes:
        stale = storage.join(out_dir, "probes.png")
        if storage.exists(stale):  # from an earlier analysis with probes: not this one's
            storage.remove(stale)
        storage.write_text(storage.join(out_dir, "analysis.json"), json.dumps(results, indent=1))
        plots.report(results, out_dir)
        return results
    if _same_images(parts):
        logging.warning("analysis: the train and eval splits are the same images (%s): the probes are fit and "
                        "tested on overlapping examples", config.data.get("root"))
    probe_fn = make_summaries(model, is_vit=is_vit, has_cls=has_cls, probes_only=True)
    probe_train, labels_train = {}, []
    train_src = sources.evenly_spaced(parts["train_source"], probe_train_examples)
    for images, labels in _batches(parts, probe_train_examples, batch, train_src):
        _collect(probe_train, probe_fn(variables, images)[0])
        labels_train.append(labels)
    results["probes"] = _probes(probe_train, np.concatenate(labels_train), probe_test, np.concatenate(labels_test),
                                parts["num_classes"], names.get("token_positions"), layer_names, seed)
    plots.probes(results["probes"], storage.join(out_dir, "probes.png"))
    storage.write_text(storage.join(out_dir, "analysis.json"), json.dumps(results, indent=1))
    plots.report(results, out_dir)
    return results


LAST_BLOCK_GRAMS = "last_block_grams.npz"


def last_block_layer(layers) -> str:
    """The last encoder block among a model's CKA layer names (`blockXX`; the last layer if none is so named)."""
    blocks = [n for n in layers if n.startswith("block")]
    return max(blocks) if blocks else layers[-1]


def image_fingerprint(images) -> np.ndarray:
    """`[B, 16]` float32: the mean over channels and pixels of each cell of a 4 × 4 grid of `images` `[B, H, W, C]`
    (as fed to the model, so a patch permutation or another preprocessing shows); identifies an analysis batch's
    images in `last_block_grams.npz` without storing them."""
    x = np.asarray(images, np.float32).mean(-1)
    rows = np.array_split(np.arange(x.shape[1]), 4)
    cols = np.array_split(np.arange(x.shape[2]), 4)
    return np.stack([x[:, r][:, :, c].mean((1, 2)) for r in rows for c in cols], axis=1)


def save_last_block_grams(out_dir: str, layer: str, grams: list, labels: list, step: int,
                          fingerprints: list | None = None) -> str:
    """Writes `out_dir/last_block_grams.npz`: the linear-kernel Gram matrices `[n_i, n_i]` of layer `layer` on each
    analysis batch i (upper triangles, float32: 0.5 MB for 4 batches of 256), the batches' labels (int32), their
    images' fingerprints (`image_fingerprint`, `[n_i, 16]` float32; None: not recorded) and the checkpoint step.
    Minibatch CKA needs nothing else of a model (`cka.MinibatchCKA.update_grams`), so two runs that saw the same
    batches can be compared from these files alone (`stored_cka_across`). Returns the path."""
    sizes = np.array([len(g) for g in grams], np.int64)
    tri = [np.asarray(g, np.float32)[np.triu_indices(len(g))] for g in grams]
    prints = np.concatenate(fingerprints).astype(np.float32) if fingerprints else np.zeros((0, 16), np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, layer=np.array(layer), step=np.array(int(step)), sizes=sizes,
                        triu=np.concatenate(tri) if tri else np.zeros(0, np.float32),
                        labels=np.concatenate(labels).astype(np.int32) if labels else np.zeros(0, np.int32),
                        fingerprints=prints)
    path = storage.join(out_dir, LAST_BLOCK_GRAMS)
    storage.write_bytes(path, buf.getvalue())
    return path


def load_last_block_grams(workdir: str) -> dict | None:
    """`{"layer", "step", "grams": [[n_i, n_i] float64 …], "labels": [Σn_i] int32, "fingerprints": [Σn_i, 16]
    float32 (empty: not recorded), "sizes"}` from a run's
    `analysis/last_block_grams.npz` (`save_last_block_grams`); None if the run has none (analysed before it existed).

    Raises:
      ValueError: a file whose triangles do not add up to its batch sizes.
    """
    path = storage.join(workdir, "analysis", LAST_BLOCK_GRAMS)
    if not storage.exists(path):
        return None
    with np.load(io.BytesIO(storage.read_bytes(path))) as f:
        sizes, tri = f["sizes"], f["triu"].astype(np.float64)
        out = {"layer": str(f["layer"]), "step": int(f["step"]), "labels": f["labels"], "grams": [],
               "fingerprints": f["fingerprints"]}
    if int(sum(n * (n + 1) // 2 for n in sizes)) != len(tri) or int(sizes.sum()) != len(out["labels"]):
        raise ValueError(f"{path}: {len(tri)} Gram entries and {len(out['labels'])} labels do not match the batch "
                         f"sizes {sizes.tolist()}")
    start = 0
    for n in map(int, sizes):
        g = np.zeros((n, n))
        iu = np.triu_indices(n)
        g[iu] = tri[start:start + len(iu[0])]
        g.T[iu] = g[iu]
        out["grams"].append(g)
        start += len(iu[0])
    out["sizes"] = sizes.tolist()
    return out


def stored_cka_across(workdir: str, other: str) -> dict | None:
    """The last-block minibatch CKA of two analysed runs from their stored Gram matrices (`save_last_block_grams`),
    as `analysis.json`'s `cka_across` (`{"other", "layers", "other_layers", "matrix" [[cka]], "from"}`; a 1 × 1
    matrix: the last block of each), with no checkpoint of either; None if either run has no stored Grams.

    Raises:
      ValueError: the two runs' analyses saw other batches (batch sizes, labels or image fingerprints differ):
        different data, preprocessing (e.g. a patch permutation), `--analysis_examples` or `--analysis_batch`.
    """
    a, b = load_last_block_grams(workdir), load_last_block_grams(other)
    if a is None or b is None:
        return None
    fa, fb = a["fingerprints"], b["fingerprints"]
    same_images = len(fa) == 0 or len(fb) == 0 or (fa.shape == fb.shape and np.allclose(fa, fb, atol=1e-3))
    if a["sizes"] != b["sizes"] or not np.array_equal(a["labels"], b["labels"]) or not same_images:
        raise ValueError(f"{workdir} and {other} were analysed on different batches (sizes {a['sizes']} vs "
                         f"{b['sizes']}, or other labels or images): their stored Gram matrices cannot be compared; "
                         "analyse both with the same data, preprocessing, --analysis_examples and --analysis_batch")
    acc = cka.MinibatchCKA()
    for ga, gb in zip(a["grams"], b["grams"], strict=True):
        acc.update_grams(ga[None], gb[None])
    return {"other": other, "layers": [a["layer"]], "other_layers": [b["layer"]],
            "matrix": acc.result().tolist(), "from": LAST_BLOCK_GRAMS}


def has_stored_grams(workdir: str) -> bool:
    """True if the run's analysis stored its last-block Gram matrices (`save_last_block_grams`)."""
    return storage.exists(storage.join(workdir, "analysis", LAST_BLOCK_GRAMS))


def has_checkpoint(workdir: str) -> bool:
    """True if `workdir/checkpoints` holds at least one numbered step (a run archived without checkpoints: False)."""
    d = storage.join(workdir, "checkpoints")
    return storage.isdir(d) and any(x.isdigit() for x in storage.listdir(d))


def _collect(acc: dict, res: dict):
    """Appends a batch's probe features (host float32) to `acc`."""
    for k, v in res["pooled"].items():
        acc.setdefault(k, []).append(np.asarray(v, np.float32))
    if "tokens" in res:
        acc.setdefault("tokens", []).append(np.asarray(res["tokens"], np.float32))


def _probes(train: dict, y_train, test: dict, y_test, num_classes, positions, layer_names, seed) -> dict:
    result = {}
    order = {name: i for i, name in enumerate(layer_names)}
    for key in sorted((k for k in train if k != "tokens"), key=lambda k: (order[k.split("/")[0]], k)):
        result[key] = probes.probe(np.concatenate(train[key]), y_train, np.concatenate(test[key]), y_test,
                                   num_classes, shots=(1, 5, 10, 25, 0), seed=seed)
    if "tokens" in train:  # one probe per token position of the last block
        tr, te = np.concatenate(train["tokens"]), np.concatenate(test["tokens"])
        for j, t in enumerate(positions):
            result[f"{layer_names[-1]}/token{t:02d}"] = probes.probe(tr[:, j], y_train, te[:, j], y_test, num_classes,
                                                                     shots=(1, 5, 10, 25, 0), seed=seed)
    return result


def run_from_flags(workdir: str, compare: str | None, config, num_examples: int, batch: int,
                   compare_config=None, probe_train_examples: int = 2000,
                   outlier_norm: float = outliers.DEFAULT_THRESHOLD, outlier_mad_k: float = outliers.DEFAULT_MAD_K):
    """Entry for `main.py --mode=analyze` (one process); see `analyze`."""
    if jax.process_count() > 1:
        raise ValueError("--mode=analyze runs on one process; run it on one host")
    if compare and compare_config is not None:
        raise ValueError("give either --compare=RUN or --compare_config (with --compare_init_from), not both")
    res = analyze(workdir, compare, config, num_examples, batch, probe_train_examples,
                  compare_config=compare_config, outlier_norm=outlier_norm, outlier_mad_k=outlier_mad_k)
    logging.info("analysis written to %s", storage.join(workdir, "analysis"))
    return res
