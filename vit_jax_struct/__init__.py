"""vit_jax_struct: train Vision Transformers at scale and measure how they learn spatial structure.

Rooms: `models` (ViT, baselines), `data` (sources, preprocessing, grain pipeline), `train` (loop, mesh and
sharding, Orbax checkpoints, optimizer, metric writers, few-shot evaluator), `analysis`, `theory`; `catalog`
(every paper row: claim, knob, commands, where it is answered; docs/experiments.md), `report` (scoreboard).
"""
