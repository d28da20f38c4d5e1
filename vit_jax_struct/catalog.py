"""The experiment catalog: every row of the two papers this package reproduces, in one place.

Rows J1–J10: Jelassi, Sander & Li 2022, "Vision Transformers provably learn spatial structure" (NeurIPS).
Rows R1–R8: Raghu, Unterthiner, Kornblith, Zhang & Dosovitskiy 2021, "Do Vision Transformers See Like
Convolutional Neural Networks?" (NeurIPS).

Each `Row` has the paper's claim and number, the knob (config keys), a small-scale command (CPU, minutes to tens of
minutes) and a full-scale one (the papers' setting; an accelerator), and what answers it here: the scoreboard
comparisons of `vit_jax_struct/report.py` (`COMPARISONS`, verdicts computed from `docs/results/runs.csv`), result
pages and plots under `docs/results/`, or why it is not measured yet. `docs/experiments.md` is generated from it:

    python -m vit_jax_struct.catalog --out=docs/experiments.md
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JELASSI = "Jelassi, Sander & Li 2022"
RAGHU = "Raghu et al. 2021"

SWEEP = "python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=runs/cifar_ablations --run"
CIFAR = "python main.py --config=configs/cifar10_vit.py --config.data.root=data/cifar10"
# Jelassi et al.'s small-data ViT (their §6): 7 blocks, 12 heads, width and MLP 384, on CIFAR-100 from TFDS.
JELASSI_VIT = ("python main.py --config=configs/cifar10_vit.py:tfds=cifar100 --config.model.depth=7 "
               "--config.model.num_heads=12 --config.model.width=384 --config.model.mlp_dim=384")
ANALYZE = "python main.py --mode=analyze --workdir=RUN"
ANALYZE_PUBLISHED = ("python main.py --mode=analyze --config=configs/vit_b16.py:folder=IMAGENET "
                     "--config.data.eval_split=val --config.init_from=ViT-B_16.npz "
                     "--compare_config=configs/bit.py:r50x1 --compare_init_from=BiT-M-R50x1.npz --workdir=OUT")
DATASIZE = ("python -m vit_jax_struct.analysis.datasize --runs=runs/cifar_ablations --steps=4000 "
            "--out=docs/results/datasize")
ACCEL = "needs an accelerator: ImageNet-scale training or analysis of published checkpoints (hours on a TPU/GPU)"


@dataclasses.dataclass(frozen=True)
class Row:
    """One catalog row. `plots`/`results` are paths relative to the repository root."""

    id: str
    paper: str           # JELASSI or RAGHU
    section: str         # where in the paper
    title: str
    claim: str           # what the paper finds
    number: str          # the paper's number, or "qualitative"
    knob: str            # config keys / analysis that implement the experiment
    small: str           # small-scale command (CPU)
    full: str            # full-scale command (the paper's setting)
    comparisons: tuple = ()   # ids in COMPARISONS whose measured rows answer this row
    results: tuple = ()       # result pages (markdown) under docs/results/
    plots: tuple = ()         # figures under docs/results/
    measured: str = ""        # what our runs show, for rows answered outside the scoreboard
    pending: str = ""         # why it is not measured (yet), and what would measure it


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A scoreboard comparison (report.py): treatment knobs vs the baseline arm of the same family and budget.

    `rule`: what the paper finds, "small" (no clear effect) or "negative" (a drop); the verdict applies
    `report.VERDICT_RULE` (|Δ| > 2 × the pooled seed spread is an effect) and compares its sign with the paper's.
    """

    id: str
    rows: tuple
    what: str
    family: str
    knobs: dict
    rule: str


ROWS = (
    Row("J1", JELASSI, "§6, Table 1", "positional vs standard attention",
        "attention computed from the positional encodings only (positional attention) trains as well as standard "
        "attention on small datasets, a little worse on ImageNet",
        "≈ equal on CIFAR-10/100, SVHN; 71.9 → 68.9 top-1 on ImageNet (ViT-Ti/16)",
        "`model.attention=positional` (`model.positional_attention_blocks`, `model.add_posemb`)",
        f"{SWEEP} --only=attention", "python main.py --config=configs/vit_ti16.py --config.model.attention=positional "
        "--workdir=runs/vit_ti16_positional  # and the same without the flag",
        comparisons=("J1",), results=("docs/results/scoreboard.md",),
        plots=("docs/results/curves/J1_positional_vs_standard_attention_ViT_at_4000_steps.png",),
        measured="at 500 steps the two train alike; at 4000 steps positional attention is clearly *better* on "
                 "CIFAR-10 (0.617 vs 0.557, 2 seeds each), ahead from the first evaluation on: on a small "
                 "dataset the attention pattern fixed by the positions is a useful inductive bias; the paper "
                 "sees ≈ equal accuracy on CIFAR-10"),
    Row("J2", JELASSI, "§6", "permuted patches (ViT)",
        "a ViT trained on images whose patches are permuted by one fixed permutation is as accurate as on the "
        "original images", "no clear effect (CIFAR-100)",
        "`data.permute_patches=True`, `data.permutation_seed`", f"{SWEEP} --only=permute_patches",
        f"{JELASSI_VIT} --config.data.permute_patches=True --workdir=runs/c100_vit_permuted",
        comparisons=("J2",)),
    Row("J3", JELASSI, "§6", "permuted patches (CNN: ResNet-18, VGG-19)",
        "CNNs lose accuracy on permuted patches (their inductive bias is spatial locality)",
        "mixed: ResNet-18 / VGG-19 lose accuracy (CIFAR-100)",
        "`data.permute_patches=True` with `configs/cifar10_vit.py:model=resnet18` or `:model=vgg19`",
        f"{SWEEP} --only=model=", "python main.py --config=configs/cifar10_vit.py:tfds=cifar100,model=vgg19 "
        "--config.data.permute_patches=True --config.data.permutation_patch_size=8 --workdir=runs/c100_vgg_perm",
        comparisons=("J3",), results=("docs/results/scoreboard.md",),
        plots=("docs/results/curves/J3_permuted_vs_original_patches_CNN_VGG-19_width_16.png",),
        measured="thin (16-channel) ResNet-18 and VGG-19, 500 steps, 2 seeds each: both lose accuracy on permuted "
                 "patches, well beyond the seed spread, while the ViT does not (J2)"),
    Row("J4", JELASSI, "§6, Figure 1", "posemb similarities after the inverse permutation",
        "the positional-encoding similarity maps of a ViT trained on permuted patches look unstructured, and "
        "become spatially local once re-indexed by the inverse permutation", "qualitative (similarity maps)",
        "analysis: `posemb` similarity + locality, re-indexed by `permutation.json`",
        f"{ANALYZE}  # RUN: a permuted-patch run of the sweep",
        f"{JELASSI_VIT} --config.data.permute_patches=True --workdir=RUN && {ANALYZE}",
        results=("docs/results/analysis/README.md",),
        plots=("docs/results/analysis/vit_cls_permuted/posemb_similarity.png",
               "docs/results/analysis/vit_cls_original/posemb_similarity.png"),
        measured="Spearman locality −0.09 in token order, −0.50 after π⁻¹ (unpermuted model −0.35): the spatial "
                 "pattern is recovered, as the paper reports"),
    Row("J5", JELASSI, "§4, Theorem 1", "one-layer ViT, population risk, gradient descent",
        "with spatially structured data, GD on the population risk generalizes and learns the patch association "
        "(the positional attention gets the partition's block structure)", "test error → 0; patch association "
        "learned", "`configs/theory/population.py` (fresh samples each step)",
        "python main.py --config=configs/theory/population.py --workdir=runs/theory/population",
        "same (the theory setting is small by design)",
        results=("docs/results/theory/README.md",),
        plots=("docs/results/theory/population/plots/attention.png",
               "docs/results/theory/population_self_init/plots/attention.png"),
        measured="test error 0.004, ARI of attention columns vs partition 1.00 (`self_init`: purity 0.896)"),
    Row("J6", JELASSI, "§4, Theorem 2", "empirical risk, polynomially many samples, Gaussian init",
        "the same with a fixed sample of polynomial size", "generalizes",
        "`configs/theory/empirical.py` (fixed n)",
        "python main.py --config=configs/theory/empirical.py --workdir=runs/theory/empirical",
        "same (the theory setting is small by design)",
        results=("docs/results/theory/README.md",),
        plots=("docs/results/theory/empirical/plots/attention.png",),
        measured="n = 2,048: test error 0.013 (train 0.000), ARI 0.68 (1.00 at steps 500–1,500)"),
    Row("J7", JELASSI, "§5, Theorem 3", "transfer of the patch association",
        "attention pretrained on one task, frozen, with only the value fine-tuned, needs far fewer downstream "
        "samples", "sample complexity reduced", "`configs/theory/transfer.py`",
        "python main.py --config=configs/theory/transfer.py --workdir=runs/theory/transfer",
        "same (the theory setting is small by design)",
        results=("docs/results/theory/README.md",), plots=("docs/results/theory/transfer/plots/transfer.png",),
        measured="samples for test error ≤ 5 %: pretrained attention 4, from scratch 128 (≥ 32× fewer)"),
    Row("J8", JELASSI, "§5", "learner without patch-association knowledge",
        "a learner that does not know the patch association needs more samples", "needs more samples",
        "`configs/theory/transfer.py` (the from-scratch baseline)",
        "python main.py --config=configs/theory/transfer.py --workdir=runs/theory/transfer",
        "same (the theory setting is small by design)",
        results=("docs/results/theory/README.md",), plots=("docs/results/theory/transfer/plots/transfer.png",),
        measured="from scratch: 128 samples vs 4 with the pretrained attention"),
    Row("J9", JELASSI, "§5", "GLM without the partition",
        "a generalized linear model on the flattened input is worse", "worse",
        "`configs/theory/transfer.py` (the GLM baseline)",
        "python main.py --config=configs/theory/transfer.py --workdir=runs/theory/transfer",
        "same (the theory setting is small by design)",
        results=("docs/results/theory/README.md",), plots=("docs/results/theory/transfer/plots/transfer.png",),
        measured="GLM (logistic regression): 2,048 samples for ≤ 5 % test error (512× the pretrained attention)"),
    Row("J10", JELASSI, "§4", "no spatial structure in the data",
        "with a random partition (no spatial structure) the patch association is not learned", "not learned",
        "`configs/theory/no_structure.py`",
        "python main.py --config=configs/theory/no_structure.py --workdir=runs/theory/no_structure",
        "same (the theory setting is small by design)",
        results=("docs/results/theory/README.md",),
        plots=("docs/results/theory/no_structure/plots/attention.png",
               "docs/results/theory/no_structure_self_init/plots/attention.png"),
        measured="ARI 0.01 (with structure 1.00); `self_init` purity 0.476 vs 0.896 with structure"),
    Row("R1", RAGHU, "§3, Figures 1–2", "ViT vs ResNet representations (CKA)",
        "ViT's lower layers hold more global information: they are dissimilar to the ResNet's lower layers and "
        "similar to its middle ones; representations are more uniform across ViT layers",
        "qualitative (CKA heatmaps)", "analysis: CKA ViT vs CNN (`--compare=CNN_RUN`)",
        f"{CIFAR} --workdir=VIT && {ANALYZE.replace('RUN', 'VIT')} --compare=CNN_RUN", ANALYZE_PUBLISHED,
        results=("docs/results/analysis/README.md", "docs/published_models.md"),
        plots=("docs/results/analysis/vit_cifar10_4k_vs_resnet18w16/cka_vs_model=resnet18w16,"
               "permute_patches=False,seed=0.png",),
        measured="ViT block 0 is least similar to the ResNet stem (CKA 0.71) and most to its middle units (0.78): "
                 "the paper's direction (small, briefly trained models)"),
    Row("R2", RAGHU, "§4, Figure 6", "too little data: early attention stays global",
        "with less pretraining data the lower layers do not learn local heads (attention distance stays large), "
        "and accuracy is lower", "ImageNet-only ViT-L/16 has no local early heads; JFT does",
        "`data.train_fraction` + analysis: mean attention distance per head",
        f"{SWEEP} --only=train_fraction && {DATASIZE}",
        "python main.py --mode=analyze --config=configs/vit_l16.py:folder=IMAGENET --config.data.eval_split=val "
        "--config.init_from=ViT-L_16.npz --workdir=OUT  # an ImageNet-21k checkpoint; then an ImageNet-1k-only one",
        comparisons=("R2/R7",), results=("docs/results/datasize/README.md",),
        plots=("docs/results/datasize/attention_distance.png",),
        measured="10 / 30 / 100 % of CIFAR-10, 4000 steps, 2 seeds: accuracy falls with less data (0.469 / 0.542 / "
                 "0.557), but the mechanism does not show at this scale — the early blocks' heads stay near-global "
                 "for every data size (mean distance 14.5 / 14.3 / 14.0 px, seed s.d. up to 0.7; uniform attention "
                 "16.1 px) and almost none is local (< 12.1 px: 0 / 6 / 0 % of the heads of blocks 0–1); a 4×4 patch "
                 "grid leaves little room for locality"),
    Row("R3", RAGHU, "§5, Figure 9", "skip connections removed in a middle block",
        "removing both residuals of one middle block costs accuracy", "≈ −4 % top-1",
        "`model.skip_ablation=3:both` (`mhsa`, `mlp`, `both`; blocks comma-separated)", f"{SWEEP} --only=skip",
        "python main.py --config=configs/vit_b16.py --config.model.skip_ablation=6:both --workdir=runs/b16_skip6",
        comparisons=("R3",)),
    Row("R4", RAGHU, "§5, Figure 9", "skip removal splits the representation",
        "with block i's skip connections removed, the CKA matrix splits into blocks before and after i",
        "qualitative (CKA heatmap)", "`model.skip_ablation` + analysis CKA",
        f"{SWEEP} --only=skip && {ANALYZE}",
        "python main.py --config=configs/vit_b16.py --config.model.skip_ablation=6:both --workdir=RUN && "
        f"{ANALYZE}",
        results=("docs/results/analysis/README.md",),
        plots=("docs/results/analysis/vit_skip3_removed/cka.png", "docs/results/analysis/vit_cls_original/cka.png"),
        measured="block 3 removed: CKA 0.98 before, 0.97–0.99 after, 0.90 across (unablated 0.99): the paper's "
                 "split"),
    Row("R5", RAGHU, "§6, Figure 10", "CLS vs GAP: localization",
        "CLS-token ViTs keep spatial localization in the output tokens; GAP models localize less",
        "qualitative (localization maps)", "`model.classifier=gap` + analysis localization",
        f"{SWEEP} --only=classifier && {ANALYZE}",
        "python main.py --config=configs/vit_b16.py --config.model.classifier=gap --config.optim.lr=3e-4 "
        f"--workdir=RUN && {ANALYZE}",
        comparisons=("R5",), results=("docs/results/analysis/README.md",),
        plots=("docs/results/analysis/vit_cls_4k/localization.png",
               "docs/results/analysis/vit_gap_4k/localization.png"),
        measured="at 4000 steps (10 epochs, 2 seeds) both classifiers localize: output tokens most similar to "
                 "their own input patch for 100 % / 100 % (CLS) and 94 % / 100 % (GAP) of the 16 positions, by a "
                 "similar margin (own-patch CKA − others': CLS +0.09 / +0.12, GAP +0.12 / +0.14); the paper's "
                 "contrast (GAP localizes much less) does not appear at this scale. (500 steps: GAP 100 % vs CLS "
                 "75 %, with near-uniform attention)"),
    Row("R6", RAGHU, "§7, Figure 12", "more pretraining data → better 10-shot transfer",
        "10-shot linear probes (closed-form ridge on {−1, +1}) of intermediate layers improve with more "
        "pretraining data (JFT vs ImageNet)", "≈ +30 % 10-shot accuracy",
        "`data.train_fraction` + the few-shot evaluator `config.fewshot` (`configs/cifar10_vit.py:fewshot`: "
        "CIFAR-10 and the embedded digits, a downstream task of other classes and another domain)",
        f"{SWEEP} --only=train_fraction && {DATASIZE}",
        "python main.py --config=configs/vit_b16.py:data=i21k --config.fewshot.every_steps=10000 --workdir=RUN  "
        "# vs configs/vit_b16.py (ImageNet-1k)",
        results=("docs/results/datasize/README.md",), plots=("docs/results/datasize/fewshot.png",),
        measured="10-shot ridge probe of the pre-logits on the digits (never seen in pretraining): 0.601 ± 0.056 "
                 "untrained → 0.752 ± 0.017 / 0.771 ± 0.008 / 0.820 ± 0.009 after pretraining on 10 / 30 / 100 % "
                 "of CIFAR-10 (2 seeds): more pretraining data transfers better, the paper's direction (+6.8 "
                 "points from 10 to 100 %, +9 % relative; the paper's JFT-vs-ImageNet gap is ≈ +30 %). On "
                 "CIFAR-10 itself: 0.433 / 0.483 / 0.502"),
    Row("R7", RAGHU, "§7, Figure 13", "smaller pretraining subsets: higher layers diverge",
        "models pretrained on 3–30 % subsets have lower layers similar to the 100 % model's and higher layers "
        "that diverge (CKA of each block to the same block of the 100 % model)", "qualitative (CKA vs block)",
        "`data.train_fraction` + analysis CKA `--compare=FULL_RUN` (`vit_jax_struct/analysis/datasize.py`)",
        f"{SWEEP} --only=train_fraction && {DATASIZE}",
        "python main.py --config=configs/vit_b16.py:data=i21k --config.data.train_fraction=0.03 --workdir=RUN && "
        f"{ANALYZE} --compare=FULL_DATA_RUN",
        comparisons=("R2/R7",), results=("docs/results/datasize/README.md",),
        plots=("docs/results/datasize/cka_to_full.png",),
        measured="CKA with the same block of the full-data model (same seed), stem → last block: 10 %: 0.99 → "
                 "0.61 ± 0.02, 30 %: 1.00 → 0.75 ± 0.00; two full-data models of different seeds: 0.99 → 0.75. "
                 "The 10 % model's higher blocks diverge beyond seed-to-seed differences (the paper's finding); "
                 "the 30 % model's do not"),
    Row("R8", RAGHU, "§6, Figure 11", "CLS vs GAP: representation similarity",
        "GAP and CLS models differ most in the last layers (the CLS token separates from the patch tokens)",
        "qualitative (CKA)", "`model.classifier=gap` + analysis CKA `--compare`",
        f"{SWEEP} --only=classifier && {ANALYZE.replace('RUN', 'GAP_RUN')} --compare=CLS_RUN",
        "python main.py --config=configs/vit_b16.py --config.model.classifier=gap --config.optim.lr=3e-4 "
        f"--workdir=RUN && {ANALYZE} --compare=CLS_RUN",
        comparisons=("R5",), results=("docs/results/analysis/README.md",),
        plots=("docs/results/analysis/vit_gap_4k/cka_vs_train_fraction=1.0,steps=4000,seed=0.png",),
        measured="4000 steps, 2 seeds: CKA of GAP with CLS, layer by layer, falls with depth (0.99 at the stem, "
                 "0.79–0.81 in the last block), the paper's pattern — but two CLS models of different seeds differ "
                 "as much (0.75 in the last block): no classifier effect beyond seed noise at this scale"),
)

COMPARISONS = (
    Comparison("J1", ("J1",), "positional vs standard attention (ViT)", "vit", {"attention": "positional"},
               "small"),
    Comparison("J2", ("J2",), "permuted vs original patches (ViT)", "vit", {"permute_patches": True}, "small"),
    Comparison("J3", ("J3",), "permuted vs original patches (CNN)", "cnn", {"permute_patches": True}, "negative"),
    Comparison("R3", ("R3",), "skip connections removed in a middle block (ViT)", "vit", {"skip_ablation": "*"},
               "negative"),
    Comparison("R5", ("R5",), "GAP vs CLS classifier (ViT)", "vit", {"classifier": "gap"}, "small"),
    Comparison("R2/R7", ("R2", "R7"), "train_fraction < 1 vs all data (ViT)", "vit", {"train_fraction": "<1"},
               "negative"),
)

BY_ID = {r.id: r for r in ROWS}


def paper_says(row_ids) -> str:
    """The papers' numbers for the given rows, `"<number> (<paper> <section>)"` joined by "; "."""
    short = {JELASSI: "Jelassi et al.", RAGHU: "Raghu et al."}
    return "; ".join(f"{BY_ID[i].number} ({short[BY_ID[i].paper]} {BY_ID[i].section})" for i in row_ids)


def _runs_from_csv(path: str) -> list[dict]:
    """The rows of `docs/results/runs.csv` as `report.read_run` dicts (types restored, `family` from the model)."""
    runs = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            runs.append({**r, "family": "vit" if r["model"].startswith("ViT") else "cnn",
                         "permute_patches": r["permute_patches"] == "True",
                         "train_fraction": float(r["train_fraction"]), "seed": int(r["seed"]),
                         "steps": int(r["steps"]), "eval/accuracy": float(r["eval/accuracy"])})
    return runs


def _rel(path: str) -> str:
    """A repository path as a link target relative to docs/."""
    return os.path.relpath(path, "docs")


def render(runs_csv: str = os.path.join(REPO, "docs", "results", "runs.csv")) -> str:
    """The markdown of `docs/experiments.md`: a summary table and one section per row, with the measured
    comparisons (report.compare on `runs_csv`) and links to existing result pages and plots."""
    from vit_jax_struct import report

    measured = report.compare(_runs_from_csv(runs_csv)) if os.path.exists(runs_csv) else []
    lines = ["# Experiments: the catalog", "",
             "<!-- generated by `python -m vit_jax_struct.catalog --out=docs/experiments.md` from "
             "vit_jax_struct/catalog.py and docs/results/runs.csv; do not edit -->", "",
             f"Rows J1–J10: {JELASSI}, *Vision Transformers provably learn spatial structure*. Rows R1–R8: "
             f"{RAGHU}, *Do Vision Transformers See Like Convolutional Neural Networks?*. Small-scale commands run "
             "on a CPU (CIFAR-10 as an image folder `data/cifar10/{train,test}/<class>/*.png`, or "
             "`configs/cifar10_vit.py:tfds=cifar10` for a prepared TFDS dataset; see the README); full-scale "
             "commands are the papers' setting and need an accelerator. Verdicts: `vit_jax_struct/report.py` "
             "(scoreboard: [results/scoreboard.md](results/scoreboard.md)); accuracies are mean ± sample s.d. over "
             f"seeds, and the one verdict rule is: {report.VERDICT_RULE}.", "",
             "| id | experiment | paper says | ours | status |", "|---|---|---|---|---|"]
    for row in ROWS:
        ms = [m for m in measured if m["id"] in row.comparisons]
        if ms:
            top = max(int(m["comparison"].rsplit(" at ", 1)[1].split()[0]) if " at " in m["comparison"] else 0
                      for m in ms)  # the longest budget compared
            ours = "; ".join(
                f"{m['comparison'].split('[')[1].split(']')[0] + ': ' if '[' in m['comparison'] else ''}"
                f"{m['delta_points']:+.1f} pts, {m['verdict']}" for m in ms
                if (int(m["comparison"].rsplit(" at ", 1)[1].split()[0]) if " at " in m["comparison"] else 0) == top)
            if top:
                ours += f" (at {top} steps)"
            if row.measured:
                ours = f"accuracy {ours}; {row.measured}"
            status = "measured" + (" (in part)" if row.pending else "")
        elif row.measured:
            ours, status = row.measured, "measured" + (" (in part)" if row.pending else "")
        else:
            ours, status = "—", "not measured yet"
        lines.append(f"| [{row.id}](#{row.id.lower()}) | {row.title} | {row.number} | {ours} | {status} |")
    for row in ROWS:
        lines += ["", f"## {row.id}", "", f"**{row.title}** — {row.paper}, {row.section}.", "",
                  f"- Paper: {row.claim}. Number: {row.number}.", f"- Knob: {row.knob}.",
                  f"- Small scale (CPU): `{row.small}`",
                  f"- Full scale: {row.full}" if row.full.startswith("same") else
                  f"- Full scale (the paper's setting; {ACCEL}): `{row.full}`"]
        ms = [m for m in measured if m["id"] in row.comparisons]
        if ms:
            lines += ["", "| comparison | model | baseline | treatment | Δ (points) | 2·s (points) | verdict |",
                      "|---|---|---|---|---|---|---|"]
            for m in ms:
                lines.append(f"| {m['comparison']} | {m['models']} | {report.comparison_cells(m)} | {m['verdict']} |")
        if row.measured:
            lines += ["", f"Measured: {row.measured}."]
        if row.pending:
            lines += ["", f"Not yet: {row.pending}."]
        links = [f"[{os.path.basename(os.path.dirname(p)) or p}/{os.path.basename(p)}]({_rel(p)})"
                 for p in row.results if os.path.exists(os.path.join(REPO, p))]
        if links:
            lines += ["", "Results: " + ", ".join(links) + "."]
        for p in row.plots:
            if os.path.exists(os.path.join(REPO, p)):
                lines += ["", f"![{row.id}: {os.path.basename(p)}]({_rel(p).replace(' ', '%20')})"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "experiments.md"))
    ap.add_argument("--runs_csv", default=os.path.join(REPO, "docs", "results", "runs.csv"))
    args = ap.parse_args(argv)
    with open(args.out, "w") as f:
        f.write(render(args.runs_csv))
    print(f"{len(ROWS)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
