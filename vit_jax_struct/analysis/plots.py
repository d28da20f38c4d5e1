"""Plots (matplotlib, Agg) and the markdown report of `analysis/run.py`. Every figure has a title, axis labels and,
for heatmaps, a colour bar."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vit_jax_struct import storage
from vit_jax_struct.analysis import attention
from vit_jax_struct.analysis.cka import resnet_unit_groups
from vit_jax_struct.analysis.localization import margin as localization_margin


def _save(fig, path):
    fig.tight_layout()
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


CKA_SCALE = ("linear CKA: 1 = same up to rotation and scale,", "0 = unrelated")


def heatmap_title(title: str, chars: int) -> str:
    """A heatmap's title wrapped to `chars` characters a line, then the CKA scale on lines of its own: one line
    when it fits, else broken only after its comma (never inside the title's words or the scale's phrases)."""
    scale = " ".join(CKA_SCALE)
    return "\n".join([textwrap.fill(title, width=chars),
                      scale if len(scale) <= chars else "\n".join(CKA_SCALE)])


def heatmap(m, rows, cols, title, path, vmin=0.0, vmax=1.0, ylabel="layer", xlabel="layer", split=None,
            col_groups=None):
    """Layer × layer matrix `[len(rows), len(cols)]` with layer names on both axes, each axis named by `ylabel` /
    `xlabel` (e.g. "layer of <model>").

    The title is a figure title wrapped to the figure's width (a long cross-model title is never cut off), the CKA
    scale on its own line(s) below it (`heatmap_title`).
    `split`: a layer index drawn as a dashed line before it on both axes (a square matrix; e.g. R4's ablated block);
    `col_groups`: `{name: [column indices]}` named on the top axis and separated by dashed lines (e.g. R1's
    ResNet groups, `cka.resnet_unit_groups`).
    """
    width = max(5.0, 1.6 + 0.35 * len(cols))
    wrapped = heatmap_title(title, int(width * 10))
    rows_height = 0.35 * max(len(rows), 5)  # a 1 x 1 map (R7/R8 from stored Grams) keeps room for its axis label
    height = 1.25 + 0.18 * len(wrapped.splitlines()) + rows_height + (0.25 if col_groups else 0.0)
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    m = np.asarray(m)
    im = ax.imshow(m, origin="lower", vmin=vmin, vmax=vmax, cmap="magma")
    if m.size <= 4:  # too few cells to read off the colour bar: the values written in them
        for (i, j), value in np.ndenumerate(m):
            ax.text(j, i, f"{value:.3f}", ha="center", va="center", fontsize=9,
                    color="black" if value > (vmin + vmax) / 2 else "white")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    if split is not None:
        for line in (ax.axhline, ax.axvline):
            line(split - 0.5, color="white", ls="--", lw=1.2)
    if col_groups:
        groups = [(name, idx) for name, idx in col_groups.items() if idx]
        for _, idx in groups[1:]:
            ax.axvline(min(idx) - 0.5, color="white", ls="--", lw=1.2)
        top = ax.secondary_xaxis("top")
        top.set_xticks([float(np.mean(idx)) for _, idx in groups], [name for name, _ in groups], fontsize=7)
        top.tick_params(length=0)
    ax.set_xlabel(textwrap.fill(xlabel, int(width * 9)), fontsize=8)
    ax.set_ylabel(textwrap.fill(ylabel, int(rows_height * 14)), fontsize=8)
    fig.suptitle(wrapped, fontsize=9)
    fig.colorbar(im, ax=ax, label="linear CKA", shrink=0.9)
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def attention_distance(d: dict, path, uniform: float | None = None, local: float | None = None):
    """Heads sorted per block (Raghu et al. Fig. 3): x = block, y = mean attention distance (pixels).

    `d`: `{block name: [heads] distances}`. The legend names each head by its rank in its block (nearest first);
    `uniform`, if given, is drawn as the distance of uniform attention, `local` as the threshold below which a head
    counts as local (`attention.LOCAL_FRACTION` × `uniform` in the analyses).
    """
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    n_heads = max((len(h) for h in d.values()), default=0)
    colors = plt.get_cmap("viridis")(np.linspace(0, 1, max(n_heads, 1)))
    offsets = np.linspace(-0.2, 0.2, max(n_heads, 1))
    for j in range(n_heads):
        xs, ys = [], []
        for i, heads in enumerate(d.values()):
            h = np.sort(np.asarray(heads))
            if j < len(h):
                xs.append(i + offsets[j])
                ys.append(h[j])
        ax.scatter(xs, ys, s=14, color=colors[j], label=f"head rank {j + 1}")
    if uniform is not None:
        ax.axhline(uniform, color="grey", ls=":", lw=1, label="uniform attention")
    if local is not None:
        ax.axhline(local, color="tab:red", ls="--", lw=0.8, label=f"local-head threshold ({local:.1f} px)")
    ax.set_xticks(range(len(d)), list(d), rotation=45, fontsize=7)
    ax.set_xlabel("encoder block (heads sorted by distance)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.set_title("Mean attention distance per head (low: local, high: global)")
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), title="heads, nearest first",
              title_fontsize=7)
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def attention_distance_panels(panels: dict, path, uniform: float | None = None, local: float | None = None,
                              early: int = 0):
    """One panel per model group (Raghu et al. Fig. 6: a panel per pretraining dataset): x = block, y = mean
    attention distance (pixels) of every head, heads sorted per block, seeds side by side with their own marker.

    `panels`: `{title: [per seed {block name: [heads] distances}]}`; `uniform`: the distance of uniform attention,
    `local`: the threshold below which a head counts as local (both drawn as horizontal lines); `early`: the number
    of leading blocks a verdict judges (shaded; 0: none).

    Raises:
      ValueError: `panels` is empty.
    """
    if not panels:
        raise ValueError("attention_distance_panels needs at least one panel")
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 1.5, 3.8), sharey=True,
                             layout="constrained", squeeze=False)
    markers = ("o", "s", "^", "D")
    n_heads = max((len(h) for seeds in panels.values() for d in seeds for h in d.values()), default=1)
    colors = plt.get_cmap("viridis")(np.linspace(0, 1, n_heads))
    for ax, (title, seeds) in zip(axes[0], panels.items(), strict=True):
        for k, d in enumerate(seeds):
            for i, heads in enumerate(d.values()):
                h = np.sort(np.asarray(heads))
                xs = i + (k - (len(seeds) - 1) / 2) * 0.25 + np.linspace(-0.08, 0.08, len(h))
                ax.scatter(xs, h, s=12, c=colors[:len(h)], marker=markers[k % len(markers)])
        if uniform is not None:
            ax.axhline(uniform, color="grey", ls=":", lw=1, label="uniform attention")
        if local is not None:
            ax.axhline(local, color="tab:red", ls="--", lw=0.8, label="local-head threshold")
        if early:
            ax.axvspan(-0.5, early - 0.5, color="0.9", zorder=0, label=f"early blocks (the first {early}: judged)")
        blocks = list(seeds[0]) if seeds else []
        ax.set_xticks(range(len(blocks)), blocks, rotation=45, fontsize=7)
        ax.set_xlabel("encoder block")
        ax.set_title(title, fontsize=9)
    axes[0][0].set_ylabel("mean attention distance (pixels; low: local)")
    # Marker = seed (grey), colour = the head's rank within its block: one legend entry each, in their own colours.
    n_seeds = max(len(seeds) for seeds in panels.values())
    handles = [plt.Line2D([], [], ls="none", marker=markers[k % len(markers)], color="0.35", ms=4, label=f"seed {k}")
               for k in range(n_seeds)]
    handles += [plt.Line2D([], [], ls="none", marker="o", color=colors[j], ms=4,
                           label=f"head rank {j + 1}" + (" (nearest)" if j == 0 else " (farthest)"
                                                         if j == n_heads - 1 else ""))
                for j in range(n_heads)]
    handles += [h for h in axes[0][-1].get_legend_handles_labels()[0]]
    axes[0][-1].legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                       title="marker: seed; colour: head rank\nwithin its block", title_fontsize=6)
    fig.suptitle("Mean attention distance per head, heads sorted by distance within each block", fontsize=9)
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def _mean_sd_n(vals):
    """Per point of a line: the mean, the sample s.d. (0 for one value) and the sorted distinct numbers of values (one
    number, or the range where points differ), from a list of 1-D arrays."""
    mean = np.asarray([v.mean() for v in vals])
    std = np.asarray([v.std(ddof=1) if len(v) > 1 else 0.0 for v in vals])
    return mean, std, sorted({len(v) for v in vals})


def lines_with_spread(series: dict, path, xlabel: str, ylabel: str, title: str, ylim=None, reference=None,
                      reference_label: str = "reference"):
    """One line per series through the mean over seeds, with a band of ± one sample standard deviation (where some
    point has two or more seeds; the title says which) and every seed's value as a dot.

    `series`: `{label: {x label: [values over seeds]}}`; x labels keep their order (categorical axis).
    `reference`: `{label: [values over seeds]}`, a level that is not a point of the x axis (e.g. an untrained model),
    drawn as a dotted horizontal line at its mean in its series' colour, named `reference_label` in the legend.

    Raises:
      ValueError: `series` is empty.
    """
    if not series:
        raise ValueError("lines_with_spread needs at least one series")
    fig, ax = plt.subplots(figsize=(9.5, 4), layout="constrained")
    xs_all = list(dict.fromkeys(x for pts in series.values() for x in pts))
    reference = reference or {}
    for label, pts in series.items():
        xi = np.asarray([xs_all.index(x) for x in pts])
        vals = [np.asarray(v, float) for v in pts.values()]
        mean, std, ns = _mean_sd_n(vals)
        (line,) = ax.plot(xi, mean, marker="o", ms=4,
                          label=f"{label} (n={ns[0]}" + (f"–{ns[-1]} per point)" if len(ns) > 1 else ")"))
        ax.fill_between(xi, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        for i, v in zip(xi, vals, strict=True):
            ax.scatter(np.full(len(v), i), v, s=8, color=line.get_color(), alpha=0.6)
        if label in reference:
            ref = np.asarray(reference[label], float)
            ax.axhline(ref.mean(), color=line.get_color(), ls=":", lw=1.2,
                       label=f"{label}: {reference_label} (n={len(ref)})")
    ax.set_xticks(range(len(xs_all)), xs_all, rotation=45 if len(xs_all) > 4 else 0, fontsize=7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never over a line
    spread = any(len(v) > 1 for pts in series.values() for v in pts.values())
    fig.suptitle(textwrap.fill(title + (" — line: mean over seeds, band: ± 1 s.d." if spread else
                                        " — one seed per point: no band"), 110), fontsize=9)
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def block_size_curves(models: dict, path, title: str):
    """Accuracy vs the side of the permuted pixel blocks on a log2 axis (Jelassi et al. Fig. 5's view), one colour per
    model, in two panels: the accuracy lost in points (accuracy − unpermuted) and relative to the unpermuted accuracy
    (accuracy ÷ unpermuted − 1, %), since models far apart in accuracy lose on different scales.

    `models`: `{model: {"ours": (label, unpermuted %, {block px: [top-1 %, one per seed]}), "paper": (label,
    unpermuted %, {block px: top-1 %})}}`, either part optional. Ours: solid lines through the means with a ± 1 sample
    s.d. band and a dot per seed; the paper's (one read-off value per point): dashed with open markers. The largest
    side (the whole image) is the unpermuted arm.

    Raises:
      ValueError: no model has a series of ours.
    """
    if not any("ours" in m for m in models.values()):
        raise ValueError("block_size_curves needs at least one series of ours")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    views = ((lambda acc, ref: acc - ref, "top-1 accuracy − unpermuted (points)"),
             (lambda acc, ref: 100.0 * (acc / ref - 1.0), "top-1 accuracy ÷ unpermuted − 1 (%)"))
    sides = sorted({x for parts in models.values() for _, _, pts in parts.values() for x in pts})
    for ax, (view, ylabel) in zip(axes, views, strict=True):
        for i, parts in enumerate(models.values()):
            for part in ("paper", "ours"):
                if part not in parts:
                    continue
                label, ref, pts = parts[part]
                xs = sorted(pts)
                # the paper's: one read-off value per point; ours: one per seed
                vals = [view(np.atleast_1d(np.asarray(pts[x], float)), ref) for x in xs]
                mean, std, ns = _mean_sd_n(vals)
                if part == "paper":
                    ax.plot(xs, mean, ls="--", marker="o", mfc="none", lw=1.2, color=f"C{i}", label=label)
                    continue
                ax.plot(xs, mean, marker="o", ms=4, lw=1.8, color=f"C{i}",
                        label=f"{label} (n={ns[0]}" + (f"–{ns[-1]}" if len(ns) > 1 else "") + " seeds per point)")
                ax.fill_between(xs, mean - std, mean + std, color=f"C{i}", alpha=0.2)
                for x, v in zip(xs, vals, strict=True):
                    ax.scatter(np.full(len(v), x), v, s=8, color=f"C{i}", alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sides, [f"{x}" + (" (unpermuted)" if x == sides[-1] else "") for x in sides], fontsize=8)
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_xlabel("side of the permuted pixel blocks (px; the whole image: unpermuted)")
        ax.set_ylabel(ylabel)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncol=2)
    fig.suptitle(textwrap.fill(title + " — solid: ours, mean over seeds ± 1 s.d., a dot per seed; dashed: the "
                               "paper's, read off its plot", 130), fontsize=9)
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def _map_grid(maps, grid, path, title, cmap, vmin, vmax, label, min_size=None):
    """One small map per entry of `maps` on a square-ish panel grid with one colour bar; `min_size` `(width,
    height)` in inches, if given, makes room for a long title and colour-bar label (laid out by matplotlib's
    constrained layout)."""
    n = len(maps)
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    size = (1.1 * cols + 1, 1.1 * rows + 0.6)
    if min_size:
        size = (max(size[0], min_size[0]), max(size[1], min_size[1]))
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False,
                             layout="constrained" if min_size else None)
    im = None
    for i, ax in enumerate(axes.flat):
        ax.set_xticks([])
        ax.set_yticks([])
        if i < n:
            im = ax.imshow(np.asarray(maps[i]).reshape(grid), cmap=cmap, vmin=vmin, vmax=vmax)
        else:
            ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.supxlabel("patch column", fontsize=8)
    fig.supylabel("patch row", fontsize=8)
    fig.colorbar(im, ax=axes, label=label, shrink=0.8)
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def posemb_similarity(s, grid, path, title):
    """One map per position: its cosine similarity with every position, on the patch grid. The title states the
    sign convention of the locality score (Spearman ρ of similarity vs grid distance: negative = local)."""
    _map_grid(s, grid, path, textwrap.fill(title + " (locality = Spearman ρ of similarity vs grid distance; "
                                           "negative = nearby positions more similar = local)", 70),
              "RdBu_r", -1.0, 1.0, "cosine similarity")


def within_cka(matrix, layers, name: str, model: dict, path) -> None:
    """The CKA of every layer pair of one model (`[L, L]`, `layers` its names); a model with a block's skip
    connections removed (`model["skip_ablation"]` "B:…") gets a dashed line before block B, where R4's split is
    measured (`verdicts.cka_split`)."""
    from vit_jax_struct.models.vit import parse_skip_ablation  # flax only where a CKA map is drawn

    depth = sum(name.startswith("block") for name in layers)
    ablated = sorted(parse_skip_ablation(model.get("skip_ablation"), depth))
    block = f"block{ablated[0]:02d}" if ablated else None
    split = list(layers).index(block) if block in layers else None
    title = f"CKA within {name}" + (f"; skip connections of {block} removed (dashed: the split before it)"
                                    if split is not None else "")
    heatmap(matrix, layers, layers, title, path, ylabel=f"layer of {name}", xlabel=f"layer of {name}", split=split)


def across_cka(across: dict, name: str, label: str, path) -> None:
    """The CKA of every layer of the analysed model `name` (rows) with every layer of the model it is compared with
    (`label`; R7/R8), from `analysis.json`'s "cka_across" (`layers`, `other_layers`, `matrix`)."""
    heatmap(across["matrix"], across["layers"], across["other_layers"], f"CKA: {name} vs {label}", path,
            ylabel=f"layer of {name}", xlabel=f"layer of {label}")


def cross_cka(result: dict, name: str, other: str, path) -> None:
    """The CKA of every layer of one model (rows) with every layer of another (columns), from a
    `analysis.run.cross_cka` result; a ResNet's columns are grouped as R1 groups them (`cka.resnet_unit_groups`).
    The other model is a ResNet when the result says so ("other_model"), or else when the other run's config.json,
    where it was recorded, does."""
    kind, cfg = result.get("other_model"), storage.join(result.get("other") or ".", "config.json")
    if kind is None and result.get("other") and storage.exists(cfg):  # a result from before "other_model"
        kind = json.loads(storage.read_text(cfg)).get("model", {}).get("name")
    units = sum(name.startswith("block") for name in result["other_layers"])
    groups = resnet_unit_groups(result["other_layers"]) if kind == "resnet" and units >= 4 else None
    title = f"CKA: {name} vs {other}" + ("; top axis: the ResNet's unit groups R1 compares" if groups else "")
    heatmap(result["matrix"], result["layers"], result["other_layers"], title, path, ylabel=f"layer of {name}",
            xlabel=f"layer of {other}", col_groups=groups)


LOCALIZATION_VMAX = 0.5  # one colour scale for every run's map, so maps of two runs compare at a glance


def localization(m, grid, path, classifier, own_patch_fraction: float):
    """One map per output token: its CKA with the input patch at every grid location (`m`: `[N, N]` token × patch
    CKA, `grid`: `(rows, cols)` with rows·cols = N). The title names the model's `classifier`, the fraction of
    tokens whose best patch is their own, and the localization margin (`localization.margin`, the number R5
    judges); the colour scale is 0 … `LOCALIZATION_VMAX` for every run (higher values, if any, saturate and the
    colour bar says so)."""
    vmax = LOCALIZATION_VMAX
    over = float(np.max(m)) > vmax
    label = "linear CKA with the input patch\n(high: the token keeps that patch)" + (
        f"\nvalues above {vmax:g} shown as {vmax:g}" if over else "")
    full = (f"token–patch CKA ({classifier}); own patch best for {own_patch_fraction:.0%}; localization margin "
            f"{localization_margin(m):+.3f} (own patch − mean of the others; colour scale 0 … {vmax:g} in every run)")
    _map_grid(m, grid, path, textwrap.fill(full, 80), "magma", 0.0, vmax, label, min_size=(7.5, 6.0))


def redraw(workdir: str) -> list[str]:
    """Redraws the figures of `workdir/analysis/` that `analysis.json` and `analysis/cross_cka/*.json` hold the
    numbers of (the CKA heatmaps, the cross-model ones, the localization maps, the norm outliers and, for a square
    patch grid, the mean attention distances with uniform attention's and the local-head threshold) without the
    checkpoint, e.g. for archived runs; returns the paths written. Raises FileNotFoundError naming the file if the
    run has no `analysis/analysis.json`."""
    path = storage.join(workdir, "analysis", "analysis.json")
    if not storage.exists(path):
        raise FileNotFoundError(f"{path}: no analysis to redraw (run main.py --mode=analyze on the run first)")
    res = json.loads(storage.read_text(path))
    written, name = [], storage.basename(str(storage.path(workdir)).rstrip("/"))
    if "cka" in res:
        out = storage.join(workdir, "analysis", "cka.png")
        within_cka(res["cka"]["matrix"], res["cka"]["layers"], name, res.get("model", {}), out)
        written.append(out)
    if "cka_across" in res:
        other = str(res["cka_across"]["other"]).rstrip("/")
        if other.endswith((".npz", ".safetensors")):  # a weights file (--compare_init_from): named by its stem
            stem = label = storage.basename(other).rsplit(".", 1)[0]
        else:
            stem, label = storage.basename(other), run_label(other, res.get("workdir", workdir))
        out = storage.join(workdir, "analysis", f"cka_vs_{stem}.png")
        across_cka(res["cka_across"], name, label, out)
        written.append(out)
    folder = storage.join(workdir, "analysis", "cross_cka")
    for file in sorted(storage.listdir(folder)) if storage.isdir(folder) else ():
        if file.endswith(".json"):
            r = json.loads(storage.read_text(storage.join(folder, file)))
            out = storage.join(folder, file[:-len(".json")] + ".png")
            cross_cka(r, name, file[:-len(".json")], out)
            written.append(out)
    if "localization" in res:
        m = np.asarray(res["localization"]["matrix"], float)
        side = round(math.sqrt(len(m)))
        out = storage.join(workdir, "analysis", "localization.png")
        localization(m, (side, side), out, res.get("model", {}).get("classifier"),
                     res["localization"]["own_patch_fraction"])
        written.append(out)
    if res.get("attention_distance_pixels"):
        try:
            grid, patch = attention.record_grid_patch(res)
        except ValueError:  # no patch size recorded: the distances alone cannot be placed against uniform attention
            pass
        else:
            uniform = float(attention.grid_distances((grid, grid), patch).mean())
            out = storage.join(workdir, "analysis", "attention_distance.png")
            attention_distance(res["attention_distance_pixels"], out, uniform=uniform,
                               local=attention.LOCAL_FRACTION * uniform)
            written.append(out)
    if "norm_outliers" in res:
        out = storage.join(workdir, "analysis", "norm_outliers.png")
        norm_outliers(res["norm_outliers"], out)
        written.append(out)
    return written


def probes(res: dict, path):
    """Accuracy per layer for each probe (feature kind × shots)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    layers = sorted({k.split("/")[0] for k in res}, key=lambda n: (n != "stem", n))
    kinds = sorted({k.split("/")[1] for k in res} - {k.split("/")[1] for k in res if "/token" in k})
    for kind in kinds:
        for shots, style in (("10", "--"), ("full", "-")):
            ys = [res.get(f"{layer}/{kind}", {}).get(shots, np.nan) for layer in layers]
            ax.plot(range(len(layers)), ys, style, marker="o", ms=3, label=f"{kind}, {shots}-shot"
                    if shots != "full" else f"{kind}, full")
    ax.set_xticks(range(len(layers)), layers, rotation=45, fontsize=7)
    ax.set_xlabel("layer")
    ax.set_ylabel("test accuracy (ridge probe)")
    ax.set_title("Linear probes per layer")
    ax.legend(fontsize=7)
    _save(fig, path)


def skip_norms(r: dict, path):
    """‖z‖/‖f(z)‖ per block for each branch and token type (Raghu et al. Fig. 8)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    blocks = sorted({k.split("/")[0] for k in r})
    for branch in ("mhsa", "mlp"):
        for tok, style in (("cls", "--"), ("patches", "-")):
            ys = [r.get(f"{b}/{branch}/{tok}", np.nan) for b in blocks]
            if not np.all(np.isnan(ys)):
                ax.plot(range(len(blocks)), ys, style, marker="o", ms=3, label=f"{branch}, {tok}")
    ax.set_xticks(range(len(blocks)), blocks, rotation=45, fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("encoder block")
    ax.set_ylabel("‖z‖ / ‖f(z)‖")
    ax.set_title("Skip-connection norm ratios")
    ax.legend(fontsize=7)
    _save(fig, path)


def _padded_log_limits(values, factor: float = 1.6) -> tuple[float, float]:
    """Log-axis limits around the finite positive `values`, a factor `factor` beyond both ends, so that a threshold
    line at the extreme is drawn inside the frame rather than on it."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, float)) if np.isfinite(x) and x > 0])
    if v.size == 0:
        return 0.1, 10.0
    return float(v.min()) / factor, float(v.max()) * factor


def _plain_log_ticks(axis) -> None:
    """Ticks of a log `axis` (e.g. `ax.xaxis`) at 1, 2, 5 × 10^k written as plain numbers ("20", "50", "100"), no
    labelled minor ticks (matplotlib labels them when the range is under a decade, and they collide)."""
    from matplotlib import ticker

    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def norm_outliers(r: dict, path):
    """High-norm patch tokens (Darcet et al. 2024 Fig. 3–4), from `analysis/outliers.py`'s result `r`: (left) per
    block, the median, 99th percentile and maximum of the patch-token norms with the fixed threshold and each block's
    robust one; (middle) the histogram of the last block's norms, log-spaced bins, counts on a log axis; (right) where
    that block's outliers (above the robust threshold) sit: the fraction of images with an outlier at each position,
    or a statement that there are none. Both thresholds are drawn inside the axes (the limits are padded past them)
    and named with their values; the legends sit below the panels, clear of the data."""
    blocks = r["blocks"]
    names = sorted(blocks)
    fixed = float(r["threshold_fixed"])
    last = r["analysis_block"]
    robust_last = float(blocks[last]["robust_threshold"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.3), gridspec_kw={"width_ratios": [1.2, 1.0, 0.9]})
    ax = axes[0]
    xs = range(len(names))
    series = (("median", "-", "median"), ("p99", "--", "99th percentile"), ("max", ":", "max"),
              ("robust_threshold", "-.", f"robust threshold (median + {r['mad_k']:g}·1.4826·MAD)"))
    for key, style, label in series:
        ax.plot(xs, [blocks[b][key] for b in names], style, marker="o", ms=3, label=label,
                color="C3" if key == "robust_threshold" else None)
    ax.axhline(fixed, color="k", lw=1.0, label=f"fixed threshold {fixed:g}")
    ax.set_yscale("log")
    ax.set_ylim(*_padded_log_limits([blocks[b][k] for b in names for k, _, _ in series] + [fixed]))
    _plain_log_ticks(ax.yaxis)
    ax.set_xticks(list(xs), names, rotation=45, fontsize=7)
    ax.set_xlabel("encoder block (output)")
    ax.set_ylabel("patch-token L2 norm")
    ax.set_title("Patch-token norms per block", fontsize=9)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    ax = axes[1]
    edges = np.asarray(r["histogram_edges"])
    counts = np.asarray(blocks[last]["histogram"], float)
    ax.stairs(np.where(counts > 0, counts, np.nan), edges, fill=True, alpha=0.6, color="C0")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(robust_last, ls="-.", lw=1.6, color="C3", label=f"robust threshold {robust_last:.3g}")
    ax.axvline(fixed, color="k", lw=1.0, label=f"fixed threshold {fixed:g}")
    occupied = edges[:-1][counts > 0]
    ax.set_xlim(*_padded_log_limits(list(occupied) + list(edges[1:][counts > 0]) + [robust_last, fixed]))
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel("patch-token L2 norm")
    ax.set_ylabel("tokens")
    o = r["outliers"]
    ax.set_title(f"{last}: {blocks[last]['fraction_above_robust']:.2%} above robust, "
                 f"{blocks[last]['fraction_above_fixed']:.2%} above fixed", fontsize=9)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    ax = axes[2]
    m = np.asarray(o["position_fraction"], float).reshape(r["grid"])
    ax.set_xlabel("patch column")
    ax.set_ylabel("patch row")
    if o["count"]:
        im = ax.imshow(m, cmap="magma", vmin=0.0, vmax=float(m.max()))
        step = max(1, max(m.shape) // 8)  # integer patch indices, at most about 8 per axis
        ax.set_xticks(range(0, m.shape[1], step))
        ax.set_yticks(range(0, m.shape[0], step))
        cos = f"neighbour cos {o['neighbour_cosine_outlier']:.2f} vs {o['neighbour_cosine_normal']:.2f} normal"
        ax.set_title(textwrap.fill(f"{last} outliers: {o['count']} of {o['tokens']} tokens in "
                                   f"{o['images_with_outlier']} of {o['images']} images; {cos}", 48), fontsize=8)
        fig.colorbar(im, ax=ax, label="fraction of images with an outlier here", shrink=0.8)
    else:  # an all-zero map would be a black square with an arbitrary colour scale: say what was found instead
        ax.set_xlim(-0.5, m.shape[1] - 0.5)
        ax.set_ylim(m.shape[0] - 0.5, -0.5)
        step = max(1, max(m.shape) // 8)
        ax.set_xticks(range(0, m.shape[1], step))
        ax.set_yticks(range(0, m.shape[0], step))
        ax.set_aspect("equal")
        ax.text(0.5, 0.5, textwrap.fill(f"no outliers: none of the {o['tokens']} patch tokens of {o['images']} "
                                        f"images is above the robust threshold ({robust_last:.3g})", 30),
                ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_title(f"{last}: where the outliers sit ({m.shape[0]} × {m.shape[1]} patches)", fontsize=8)
    fig.suptitle("High-norm patch tokens (Darcet et al. 2024)", fontsize=10)
    _save(fig, path)


# The training-curve figure lives with the trainer, which draws each run's own curves.png; re-exported here for the
# report and the data-size study.
from vit_jax_struct.train.curves import CURVE_PANELS, _series, fewshot_keys, training_curves  # noqa: E402,F401


def run_label(other: str, workdir: str) -> str:
    """How a figure names the run `other` compared with `workdir`: its name, with its sweep folder where the two lie
    in different folders (two folders may hold runs of one name, e.g. a run trained again elsewhere)."""
    name, parent = storage.basename(other), storage.dirname(other)
    return name if not parent or parent == storage.dirname(workdir) else f"{storage.basename(parent)}/{name}"


def report(results: dict, out_dir: str) -> str:
    """Writes `out_dir/report.md`: the plots that exist, with the headline numbers."""
    name = storage.basename(results["workdir"])
    present = set(storage.listdir(out_dir))
    lines = [f"# Analysis of `{name}` (step {results['step']}, {results['examples']} eval examples)", ""]
    m = results["model"]
    lines += [f"Model: `{m.get('name', 'vit')}` {m.get('variant', '')} classifier={m.get('classifier', '-')} "
              f"attention={m.get('attention', '-')} skip_ablation={m.get('skip_ablation') or '-'}", ""]

    def img(file, caption):
        if file in present:
            lines.extend([f"## {caption}", "", f"![{caption}]({file})", ""])
            return True
        return False

    if img("cka.png", "CKA between layers"):
        c = np.asarray(results["cka"]["matrix"])
        lines += [f"Mean off-diagonal CKA {c[~np.eye(len(c), dtype=bool)].mean():.3f}.", ""]
    for f in sorted(present):
        if f.startswith("cka_vs_"):
            other = results.get("cka_across", {}).get("other")
            named = other and storage.basename(other) == f[7:-4]  # a run (a checkpoint file keeps its file name)
            img(f, f"CKA across models ({run_label(other, results['workdir']) if named else f[7:-4]})")
            c = np.asarray(results["cka_across"]["matrix"])
            lines += [f"Max CKA of each of this model's layers with any layer of the other: "
                      f"{', '.join(f'{v:.2f}' for v in c.max(1))}.", ""]
    if img("attention_distance.png", "Mean attention distance"):
        for b, h in results["attention_distance_pixels"].items():
            lines.append(f"- {b}: " + ", ".join(f"{v:.1f}" for v in sorted(h)) + " px")
        lines.append("")
    if img("posemb_similarity.png", "Positional-embedding similarity"):
        p = results["posemb"]
        lines += [f"Locality (Spearman of similarity vs grid distance): {p['locality_spearman']:.3f}"
                  + (f" after π⁻¹ re-indexing ({p['locality_spearman_token_order']:.3f} in token order)"
                     if p["reindexed_by_inverse_permutation"] else ""), ""]
        img("posemb_similarity_token_order.png", "Positional-embedding similarity in token order (not re-indexed)")
    if img("localization.png", "Localization"):
        lines += [f"Own patch is the best-matching location for "
                  f"{results['localization']['own_patch_fraction']:.1%} of output tokens.", ""]
    if "probes" in results and img("probes.png", "Linear probes"):
        lines += ["| layer/feature | 1-shot | 5-shot | 10-shot | 25-shot | full |", "|---|---|---|---|---|---|"]
        for k, v in results["probes"].items():
            lines.append(f"| {k} | " + " | ".join(f"{v[s]:.3f}" for s in ("1", "5", "10", "25", "full")) + " |")
        lines.append("")
    if img("skip_norms.png", "Skip norm ratios"):
        lines += ["| block/branch/tokens | ‖z‖/‖f(z)‖ |", "|---|---|"]
        lines += [f"| {k} | {v:.2f} |" for k, v in results["skip_norm_ratios"].items()]
        lines.append("")
    if img("norm_outliers.png", "High-norm patch tokens"):
        r = results["norm_outliers"]
        lines += [f"Fixed threshold {r['threshold_fixed']:g}; robust threshold median + {r['mad_k']:g}·1.4826·MAD.", "",
                  "| block | median | p99 | max | robust threshold | above robust | above fixed |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {b} | {v['median']:.3g} | {v['p99']:.3g} | {v['max']:.3g} | {v['robust_threshold']:.3g} | "
                  f"{v['fraction_above_robust']:.2%} | {v['fraction_above_fixed']:.2%} |"
                  for b, v in sorted(r["blocks"].items())]
        o = r["outliers"]
        lines.append("")
        if o["count"]:
            lines.append(f"{r['analysis_block']}: {o['count']} outlier tokens in {o['images_with_outlier']} of "
                         f"{o['images']} images; patch-embedding cosine to the 4 neighbours "
                         f"{o['neighbour_cosine_outlier']:.3f} (outliers) vs {o['neighbour_cosine_normal']:.3f} "
                         f"(normal).")
        for kind, p in o["position_probe"].items():
            if isinstance(p, dict):
                lines.append(f"- position probe on {kind} tokens: " + (
                    f"top-1 {p['top1']:.3f} (chance {p['chance_top1']:.3f}), mean distance "
                    f"{p['mean_distance_patches']:.2f} patches, {p['n_test']} test tokens" if "top1" in p
                    else f"not fit ({p['reason']})"))
        lines.append("")
    path = storage.join(out_dir, "report.md")
    storage.write_text(path, "\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    """`python -m vit_jax_struct.analysis.plots RUN [RUN ...]`: redraws each run's figures from its analysis.json."""
    runs = sys.argv[1:] if argv is None else argv
    if not runs:
        print("usage: python -m vit_jax_struct.analysis.plots RUN [RUN ...] (run folders with analysis/analysis.json)",
              file=sys.stderr)
        return 2
    for run in runs:
        try:
            for path in redraw(run):
                print(path)
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
