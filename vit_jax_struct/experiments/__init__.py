"""The science layer: the paper rows and their rules, the statistics, and what reads the runs to judge them.

- `catalog`: every row of the two papers as data (claim, metric, margin, direction, knob, status rules); imports
  nothing of the package.
- `stats`: Welch / paired intervals, equivalence margins and the status vocabulary (`reproduced`, `contradicted`,
  `inconclusive`, …), from per-seed values.
- `report`: the scoreboard of one or more sweeps (`python -m vit_jax_struct.experiments.report`).
- `verdicts`: the representation verdicts of a sweep's runs (CKA, attention distance, localization, posemb).
- `datasize`: the data-size figures and verdicts (R2, R6, R7) of the CIFAR-10 8×8-grid sweep.
- `catalog_page`: writes docs/experiments.md from the catalog and the verdicts.

The representation analyses themselves (CKA, attention distance, probes, plots) are in `vit_jax_struct.analysis`; the
theory study (Jelassi et al.'s model) in `vit_jax_struct.theory`.
"""
