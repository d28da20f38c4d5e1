"""Theory experiments of Jelassi, Sander & Li 2022: spatially structured synthetic data, the one-layer
positional-attention ViT, gradient-descent training, patch association, transfer and baselines."""
