"""Training curves as a PNG: train loss, eval accuracy and few-shot accuracy vs step (matplotlib, Agg).

`training_curves({label: metrics records}, path, title)` draws one panel per measure with one line per run (the
run's own `workdir/curves.png`, written by the trainer at every checkpoint and at the end) or per arm of a comparison
(`vit_jax_struct/experiments/report.py`). Legends sit below their panel, so many series (few-shot k × datasets × arms) never cover
the lines. `path` may be local or `gs://` (rendered in memory, written whole through `storage`).
"""

from __future__ import annotations

import textwrap

import numpy as np

from vit_jax_struct import storage

SEQUENTIAL = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")  # one few-shot data set each; shade = k
CURVE_PANELS = (("train/loss", "train loss"), ("eval/accuracy", "eval accuracy"),
                ("fewshot/", "few-shot accuracy (ridge on pre-logits)"))


MIN_ACCURACY_SPAN = 0.1  # fraction: an accuracy panel shows at least 10 points, so a 1-point wobble looks like one


def _accuracy_axis(ax) -> None:
    """Widens `ax`'s y range (accuracy, a fraction) to at least `MIN_ACCURACY_SPAN` around its data, inside [0, 1]:
    autoscaling alone drew a flat 48.1–49.2 % eval curve at full panel height, read as a swing."""
    if not ax.lines:
        return
    low, high = ax.get_ylim()
    if high - low >= MIN_ACCURACY_SPAN:
        return
    mid = (low + high) / 2
    low = min(max(mid - MIN_ACCURACY_SPAN / 2, 0.0), 1.0 - MIN_ACCURACY_SPAN)
    ax.set_ylim(low, low + MIN_ACCURACY_SPAN)


def _step_axis(ax) -> None:
    """Labels `ax`'s x axis "step" with at most 6 ticks on round numbers, steps from 10,000 written as `12k`, so
    tick labels of long runs never run together (seen at 16,000 steps: "10000120001400016000")."""
    from matplotlib import ticker

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=6, integer=True, steps=[1, 2, 2.5, 5, 10]))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(
        lambda x, _: f"{x / 1000:g}k" if abs(x) >= 10_000 else f"{x:g}"))


def _series(records, key):
    """`(steps, values)` of `key` in metrics records (`[{"step": …, key: …}]`), sorted by step; last value wins."""
    pts = {}
    for r in records:
        if key in r and r[key] is not None:
            pts[int(r["step"])] = float(r[key])
    steps = sorted(pts)
    return np.asarray(steps), np.asarray([pts[s] for s in steps])


def fewshot_keys(records) -> list[str]:
    """The `fewshot/<name>_<k>shot` keys present, sorted by name then k."""
    keys = {k for r in records for k in r if k.startswith("fewshot/")}

    def order(k):
        name, _, shots = k[len("fewshot/"):].rpartition("_")
        return name, int(shots[:-4]) if shots[:-4].isdigit() else 0
    return sorted(keys, key=order)


def training_curves(runs: dict, path, title: str) -> None:
    """Train loss, eval accuracy and few-shot accuracy vs step, one panel each, one line per run.

    `runs`: `{label: metrics records}` (`train/metrics.py:read_metrics`): one run gives its own curves, several
    overlay them (a comparison's arms). Few-shot lines of one run: colour family by data set, shade and line style by
    k (`fewshot/<name>_<k>shot`, darker = more shots); runs without
    few-shot metrics get no few-shot panel. A loss or accuracy panel without data says so.

    Raises:
      ValueError: `runs` is empty.
      storage.StorageError: the file cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("training_curves needs at least one run")
    styles = ("-", "--", "-.", ":")
    if len(runs) > 1:  # a comparison's arms: the 10-shot probes only, one legend of runs outside the panels
        panels = 3 if any(fewshot_keys(r) for r in runs.values()) else 2  # no empty few-shot panel
        fig, axes = plt.subplots(1, panels, figsize=(4.4 * panels + 0.5, 5.0), layout="constrained")
        _overlay(runs, axes, styles, fig)
        fig.suptitle(textwrap.fill(title, 150), fontsize=9)
        storage.savefig(fig, path, dpi=110)
        plt.close(fig)
        return
    panels = 3 if any(fewshot_keys(r) for r in runs.values()) else 2  # a run without few-shot probes: no empty panel
    fig, axes = plt.subplots(1, panels, figsize=(4.4 * panels, 4.6), layout="constrained")
    colors = plt.get_cmap("tab10")(np.arange(len(runs)) % 10)
    for (label, records), color in zip(runs.items(), colors, strict=True):
        for ax, (key, _) in zip(axes[:2], CURVE_PANELS[:2], strict=True):
            x, y = _series(records, key)
            if len(x):
                ax.plot(x, y, color=color, marker="o" if len(x) < 20 else None, ms=3, label=label)
        keys = fewshot_keys(records)
        names = sorted({k[len("fewshot/"):].rpartition("_")[0] for k in keys})
        shots = sorted({k.rpartition("_")[2] for k in keys}, key=lambda t: int(t[:-4]) if t[:-4].isdigit() else 0)
        for key in keys:  # line style by k; colour by data set (one run) or by run, marker by data set (several)
            x, y = _series(records, key)
            short = key[len("fewshot/"):]
            name, _, k = short.rpartition("_")
            i = names.index(name)
            shade = 0.45 + 0.55 * shots.index(k) / max(len(shots) - 1, 1)  # darker = more shots
            axes[2].plot(x, y, styles[shots.index(k) % len(styles)], ms=3, lw=1.6,
                         color=plt.get_cmap(SEQUENTIAL[i % len(SEQUENTIAL)])(shade) if len(runs) == 1 else color,
                         marker="o" if len(runs) == 1 else "osv^D<>p"[i % 8],
                         label=short if len(runs) == 1 else f"{label}: {short}")
    for ax, (key, name) in zip(axes, CURVE_PANELS[:panels]):
        _step_axis(ax)
        ax.set_ylabel(name)
        if key != "train/loss":
            _accuracy_axis(ax)
        ax.grid(alpha=0.3)
        n = len(ax.lines)
        if n > 1:  # below the panel, in columns: never over the curves, however many series
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(3, n), frameon=False,
                      handlelength=3.5)
        elif not n:
            ax.text(0.5, 0.5, f"no {key.rstrip('/')} metrics", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(textwrap.fill(title, 150), fontsize=9)
    storage.savefig(fig, path, dpi=110)
    plt.close(fig)


def _arm(label: str) -> tuple[str, str]:
    """`("vit_gap", "seed=1")` of a run label `"vit_gap,seed=1"`; `(label, "")` without a seed."""
    arm, sep, seed = label.partition(",seed=")
    return (arm, f"seed={seed}") if sep else (label, "")


def _overlay(runs: dict, axes, styles, fig) -> None:
    """Several runs in one figure (a comparison): colour = arm (the label without `,seed=N`), marker = seed, one
    legend right of the panels; the few-shot panel (when there is one) keeps the 10-shot probes (all k if there is
    none), line style = few-shot data set."""
    import matplotlib.pyplot as plt

    arms = list(dict.fromkeys(_arm(label)[0] for label in runs))
    seeds = list(dict.fromkeys(_arm(label)[1] for label in runs))
    markers = "osD^v<>p"
    datasets: dict = {}
    for label, records in runs.items():
        arm, seed = _arm(label)
        color = plt.get_cmap("tab10")(arms.index(arm) % 10)
        marker = markers[seeds.index(seed) % len(markers)]
        for ax, (key, _) in zip(axes[:2], CURVE_PANELS[:2], strict=True):
            x, y = _series(records, key)
            if len(x):
                # Long series: every k-th point marked, so the seed stays readable without a cloud of markers.
                ax.plot(x, y, color=color, marker=marker, markevery=max(1, len(x) // 8), ms=3.5, alpha=0.85)
        keys = fewshot_keys(records) if len(axes) > 2 else []
        for key in [k for k in keys if k.endswith("_10shot")] or keys:
            x, y = _series(records, key)
            style = datasets.setdefault(key[len("fewshot/"):], styles[len(datasets) % len(styles)])
            axes[2].plot(x, y, style, color=color, marker=marker, ms=3.5, alpha=0.85)
    for ax, (key, name) in zip(axes, CURVE_PANELS, strict=False):
        _step_axis(ax)
        ax.set_ylabel(name)
        if key != "train/loss":
            _accuracy_axis(ax)
        ax.grid(alpha=0.3)
    if datasets:
        axes[2].legend([plt.Line2D([], [], color="k", ls=st) for st in datasets.values()], list(datasets),
                       fontsize=7, title="few-shot probe", title_fontsize=7)
    handles = [plt.Line2D([], [], color=plt.get_cmap("tab10")(i % 10), lw=2, label=a) for i, a in enumerate(arms)]
    if any(seeds):
        handles += [plt.Line2D([], [], color="0.4", ls="none", marker=markers[i % len(markers)], label=s)
                    for i, s in enumerate(seeds)]
    # Below the panels, in one row: never over a curve, and clear of the title above.
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 8), fontsize=7,
               title="arm (colour), seed (marker)", title_fontsize=7, frameon=False)
