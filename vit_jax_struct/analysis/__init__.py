"""Representation analyses (Raghu et al. 2021; Jelassi et al. 2022): CKA, attention distance, posemb similarity,
localization, linear probes, skip norm ratios, plots and the per-run report."""
