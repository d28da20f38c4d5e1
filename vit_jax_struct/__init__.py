"""vit_jax_struct: train Vision Transformers at scale and measure how they learn spatial structure.

Rooms: `models` (ViT, baselines), `data` (sources, preprocessing, grain pipeline), `train` (loop, mesh and
sharding, Orbax checkpoints, optimizer, metric writers). See DESIGN notes in the repository for the layout.
"""
