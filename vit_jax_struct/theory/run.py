"""Theory experiments (catalog rows J5–J10): `python main.py --config=configs/theory/<name>.py --workdir=…`.

Modes (`config.theory.mode`):
- `population` (J5, and J10 with `theory.data.structured=False`): gradient descent where every step draws fresh
  samples (a stochastic estimate of the population gradient, `theory.train.batch` examples a step);
- `empirical` (J6): gradient descent on a fixed training set of `theory.train.n_train` examples;
- `transfer` (J7–J9): pretrain on feature w* (population GD), freeze the attention, fine-tune only v on downstream
  data with the same partition and a new feature w' ⟂ w*; test error vs the number of downstream samples n' for
  (a) this learner, (b) the same model trained from scratch (Q and v) on the downstream data, and (c) a GLM
  (logistic regression on the flattened input, no knowledge of the partition, scikit-learn).

Writes `metrics.jsonl` (`theory/…` keys per step), `summary.json`, `plots/*.png` and `summary.md` in the workdir.
"""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from absl import logging
from sklearn.linear_model import LogisticRegression

from vit_jax_struct import storage
from vit_jax_struct.theory import data as tdata
from vit_jax_struct.theory import model as tmodel

MODES = ("population", "empirical", "transfer")


class _Writer:
    """`metrics.jsonl` of a theory run (minutes long, rerun from scratch): kept in memory, written whole (also to a
    `gs://` workdir) at most every `flush_secs` and at the end."""

    def __init__(self, workdir, flush_secs: float = 30.0):
        storage.makedirs(storage.join(workdir, "plots"))
        self.path, self.lines, self.flush_secs, self.last = storage.join(workdir, "metrics.jsonl"), [], flush_secs, 0.0

    def write(self, step, d):
        self.lines.append(json.dumps({"step": int(step), **{k: float(v) for k, v in d.items()}}))
        if time.time() - self.last >= self.flush_secs:
            self.close()

    def close(self):
        storage.write_text(self.path, "".join(line + "\n" for line in self.lines))
        self.last = time.time()


def _sampler(cfg, partition, w, seed):
    rng = np.random.default_rng(seed)
    d = cfg.data

    def draw(n, feature=w, structured=d.structured):
        return tdata.sample(n, partition, feature, rng, d.alpha, d.noise_prob, d.sigma, structured)

    return draw


def gd(params, loss_x, loss_y, cfg, steps: int, lr: float, train_keys=("Q", "v"), draw=None, on_eval=None,
       eval_every: int = 0):
    """Full-batch gradient descent on the logistic loss; `draw(n)` gives fresh samples per step (population mode),
    else the fixed `(loss_x, loss_y)` are used. Only `train_keys` are updated. Calls `on_eval(step, params)`."""
    act = cfg.model.activation

    @jax.jit
    def step_fn(p, x, y):
        g = jax.grad(tmodel.logistic_loss)(p, x, y, act)
        return {k: (p[k] - lr * g[k]) if k in train_keys else p[k] for k in p}

    if on_eval:
        on_eval(0, params)
    for s in range(1, steps + 1):
        if draw is not None:
            b = draw(cfg.train.batch)
            loss_x, loss_y = b["x"], b["y"]
        params = step_fn(params, jnp.asarray(loss_x), jnp.asarray(loss_y))
        if on_eval and eval_every and (s % eval_every == 0 or s == steps):
            on_eval(s, params)
    return params


def _init(cfg, key, w):
    m = cfg.model
    p = tmodel.init_params(key, cfg.data.num_patches, cfg.data.dim, m.q_init_std, m.v_init_std,
                           m.get("q_init", "gaussian"), m.get("q_init_diag", 0.0))
    if m.v_fixed_scale:
        p["v"] = jnp.asarray(m.v_fixed_scale * w)
    return p


def train_one(cfg, workdir, writer) -> dict:
    """Population or empirical GD with tracking; returns the summary."""
    d = cfg.data
    partition = tdata.make_partition(d.num_patches, d.set_size, d.partition, cfg.seed)
    w = tdata.unit_vector(d.dim, cfg.seed)
    draw = _sampler(cfg, partition, w, cfg.seed + 1)
    test = draw(cfg.train.test_examples)
    train = draw(cfg.train.n_train) if cfg.theory_mode == "empirical" else None
    keys = ("Q",) if cfg.model.v_fixed_scale else ("Q", "v")
    snapshots, history = {}, []
    steps = cfg.train.steps

    def on_eval(step, p):
        a = np.asarray(tmodel.attention(p["Q"]))
        rec = {"theory/test_error": tmodel.test_error(p, jnp.asarray(test["x"]), jnp.asarray(test["y"]),
                                                      cfg.model.activation)}
        rec.update({f"theory/{k}": v for k, v in tmodel.patch_association(a, partition).items()})
        if train is not None:
            rec["theory/train_error"] = tmodel.test_error(p, jnp.asarray(train["x"]), jnp.asarray(train["y"]),
                                                          cfg.model.activation)
        writer.write(step, rec)
        history.append((step, rec))
        if step in (0, steps // 2, steps) or not snapshots:
            snapshots[step] = a
        logging.info("theory step %d: %s", step, {k: round(v, 4) for k, v in rec.items()})

    params = _init(cfg, jax.random.key(cfg.seed), w)
    params = gd(params, None if train is None else train["x"], None if train is None else train["y"], cfg, steps,
                cfg.train.lr, keys, draw if train is None else None, on_eval, cfg.train.eval_every)
    snapshots[steps] = np.asarray(tmodel.attention(params["Q"]))
    _plot_association(history, len(partition[0]) / d.num_patches, storage.join(workdir, "plots", "association.png"),
                      cfg.name)
    _plot_heatmaps(snapshots, partition, storage.join(workdir, "plots", "attention.png"))
    final = history[-1][1]
    return {"mode": cfg.theory_mode, "structured": bool(d.structured), "final": final,
            "chance_purity": d.set_size / d.num_patches, "steps": steps,
            "n_train": cfg.train.n_train if train is not None else None}


def transfer(cfg, workdir, writer) -> dict:
    """J7–J9: pretrain attention on w*, fine-tune v on w' data; compare with scratch and a GLM over n'."""
    d, t = cfg.data, cfg.transfer
    partition = tdata.make_partition(d.num_patches, d.set_size, d.partition, cfg.seed)
    w = tdata.unit_vector(d.dim, cfg.seed)
    w2 = tdata.unit_vector(d.dim, cfg.seed + 100, orthogonal_to=w)
    pre_draw = _sampler(cfg, partition, w, cfg.seed + 1)
    params = _init(cfg, jax.random.key(cfg.seed), w)
    pre_keys = ("Q",) if cfg.model.v_fixed_scale else ("Q", "v")
    params = gd(params, None, None, cfg, t.pretrain_steps, cfg.train.lr, pre_keys, pre_draw)
    q_pre = params["Q"]
    a_pre = np.asarray(tmodel.attention(q_pre))
    pre_assoc = tmodel.patch_association(a_pre, partition)
    logging.info("transfer: pretrained attention %s", pre_assoc)
    down = _sampler(cfg, partition, w2, cfg.seed + 2)
    test = down(t.test_examples, feature=w2)
    tx, ty = jnp.asarray(test["x"]), jnp.asarray(test["y"])
    curves = {"frozen_attention": [], "scratch": [], "glm": []}
    for i, n in enumerate(t.n_values):
        tr = down(int(n), feature=w2)
        x, y = tr["x"], tr["y"]
        key = jax.random.key(cfg.seed + 1000 + i)
        fin = tmodel.init_params(key, d.num_patches, d.dim, cfg.model.q_init_std, t.v_init_std)
        fin["Q"] = q_pre
        fin = gd(fin, x, y, cfg, t.finetune_steps, t.lr, ("v",))
        scratch = tmodel.init_params(key, d.num_patches, d.dim, cfg.model.q_init_std, t.v_init_std)
        scratch = gd(scratch, x, y, cfg, t.finetune_steps, t.lr, ("Q", "v"))
        glm = LogisticRegression(C=t.glm_c, max_iter=2000).fit(x.reshape(len(x), -1), y)
        errs = {"frozen_attention": tmodel.test_error(fin, tx, ty, cfg.model.activation),
                "scratch": tmodel.test_error(scratch, tx, ty, cfg.model.activation),
                "glm": float(np.mean(glm.predict(test["x"].reshape(len(ty), -1)) != test["y"]))}
        for k, v in errs.items():
            curves[k].append(v)
        writer.write(int(n), {f"theory/test_error/{k}": v for k, v in errs.items()})
        logging.info("transfer n'=%d: %s", n, errs)
    thr = t.target_error
    # Samples needed: the smallest n' from which the error stays ≤ target for every larger n' tried.
    first = {}
    for k, v in curves.items():
        ok = [e <= thr for e in v]
        first[k] = next((int(t.n_values[i]) for i in range(len(ok)) if all(ok[i:])), None)
    _plot_transfer(list(t.n_values), curves, thr, storage.join(workdir, "plots", "transfer.png"))
    return {"mode": "transfer", "pretrained_association": pre_assoc, "n_values": list(t.n_values),
            "test_error": curves, "target_error": thr, "samples_to_target": first}


def run(cfg, workdir: str) -> dict:
    """Runs `cfg.theory_mode`; writes metrics, plots, `summary.json` and `summary.md`.

    Raises:
      ValueError: unknown mode.
    """
    if cfg.theory_mode not in MODES:
        raise ValueError(f"config.theory_mode {cfg.theory_mode!r} is not one of {MODES}")
    storage.makedirs(workdir)
    storage.write_text(storage.join(workdir, "config.json"), cfg.to_json_best_effort(indent=2, sort_keys=True))
    writer = _Writer(workdir)
    try:
        summary = transfer(cfg, workdir, writer) if cfg.theory_mode == "transfer" else train_one(cfg, workdir, writer)
    finally:
        writer.close()
    summary["name"] = cfg.name
    storage.write_text(storage.join(workdir, "summary.json"), json.dumps(summary, indent=2))
    plots = storage.listdir(storage.join(workdir, "plots"))
    storage.write_text(storage.join(workdir, "summary.md"),
                       f"# {cfg.name}\n\n```json\n{json.dumps(summary, indent=2)}\n```\n\nPlots: "
                       + ", ".join(f"[{p}](plots/{p})" for p in plots) + "\n")
    return summary


def _plot_association(history, chance, path, title):
    steps = [s for s, _ in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, label in (("theory/purity", "set purity"), ("theory/own_set_mass", "own-set mass"),
                     ("theory/ari", "ARI (columns vs partition)"), ("theory/test_error", "test error")):
        ax.plot(steps, [r[k] for _, r in history], label=label)
    ax.axhline(chance, ls=":", c="grey", label=f"chance C/D = {chance:.2f}")
    ax.set_xlabel("GD step")
    ax.set_ylabel("value")
    ax.set_title(f"Patch association over training ({title})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def _plot_heatmaps(snapshots, partition, path):
    order = np.concatenate(list(partition))  # positions grouped by set: blocks on the diagonal = own-set attention
    steps = sorted(snapshots)
    fig, axes = plt.subplots(1, len(steps), figsize=(3.2 * len(steps), 3.2), squeeze=False)
    for ax, s in zip(axes[0], steps, strict=True):
        im = ax.imshow(snapshots[s][np.ix_(order, order)], vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"step {s}")
        ax.set_xlabel("key position (grouped by set)")
        ax.set_ylabel("query position")
    fig.colorbar(im, ax=axes.ravel().tolist(), label="attention weight")
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def _plot_transfer(ns, curves, thr, path):
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = {"frozen_attention": "pretrained attention, fine-tune v", "scratch": "same model from scratch",
              "glm": "GLM (logistic regression, flattened)"}
    for k, v in curves.items():
        ax.plot(ns, v, marker="o", label=labels[k])
    ax.axhline(thr, ls=":", c="grey", label=f"target {thr:.0%}")
    ax.set_xscale("log")
    ax.set_xlabel("downstream training samples n'")
    ax.set_ylabel("test error")
    ax.set_title("Transfer with learned patch association")
    ax.legend(fontsize=8)
    fig.tight_layout()
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)
