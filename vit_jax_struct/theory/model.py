"""One-layer positional-attention ViT of Jelassi, Sander & Li 2022 (§3, Eq. for f) and its measurements.

    f(X) = Σ_i σ( Σ_j softmax_j(p_iᵀ Q p_j) ⟨v, X_j⟩ )

The positional encodings p_i are fixed and orthonormal, so `p_iᵀ Q p_j` ranges over all D×D matrices: we take
p_i = e_i and learn the attention logits `Q` `[D, D]` directly (row i = query position i), either as a free matrix
(`parametrization="free"`) or, as in the paper's model where the logits are the Gram matrix A = PᵀP of learned
positional encodings trained off the diagonal, as a symmetric matrix with a fixed zero diagonal
(`"symmetric"`: A = U + Uᵀ, U the strict upper triangle of `Q`). `v ∈ R^d` is the value
vector. σ is a polynomial activation, cubic by default (the paper's choice of a polynomial σ; `"cubic"`: z³,
`"cubic_linear"`: z + z³, `"linear"`: z). Training minimises the logistic loss `log(1 + exp(−y f(X)))` by full-batch
gradient descent.

Patch association (how the attention matches the partition S_1 … S_L), for A = softmax(Q) row-wise:
- set purity = mean_i max_ℓ Σ_{j∈S_ℓ} A_ij — how completely position i attends to one whole set (chance C/D);
- own-set mass = mean_i Σ_{j∈S_ℓ(i)} A_ij — how much it attends to its own set (chance C/D);
- ARI = adjusted Rand index between a k-means clustering (k = L) of A's columns and the true partition.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

ACTIVATIONS = {"cubic": lambda z: z ** 3, "cubic_linear": lambda z: z + z ** 3, "linear": lambda z: z}


Q_INITS = ("gaussian", "identity")


def init_params(key, num_patches: int, dim: int, q_init_std: float, v_init_std: float, q_init: str = "gaussian",
                q_init_diag: float = 0.0) -> dict:
    """`{"Q": [D, D], "v": [d] N(0, v_init_std²)}` float32.

    `q_init="gaussian"`: Q ~ N(0, q_init_std²). `q_init="identity"`: Q = q_init_diag · I + N(0, q_init_std²); with
    orthonormal p_i the logits are p_iᵀQp_j ≈ q_init_diag · δ_ij, i.e. every patch starts attending (softly) to itself.

    Raises:
      ValueError: unknown `q_init`.
    """
    if q_init not in Q_INITS:
        raise ValueError(f"theory.model.q_init {q_init!r} is not one of {Q_INITS}")
    kq, kv = jax.random.split(key)
    q = q_init_std * jax.random.normal(kq, (num_patches, num_patches))
    if q_init == "identity":
        q = q + q_init_diag * jnp.eye(num_patches)
    return {"Q": q, "v": v_init_std * jax.random.normal(kv, (dim,))}


PARAMETRIZATIONS = ("free", "symmetric")


def logits(q, parametrization: str = "free") -> jnp.ndarray:
    """The attention logits `[D, D]` of the parameter `q` `[D, D]`: `q` itself ("free"), or the symmetric matrix
    with zero diagonal built from its strict upper triangle ("symmetric", the paper's A = PᵀP trained off the
    diagonal).

    Raises:
      ValueError: unknown parametrization.
    """
    if parametrization == "free":
        return q
    if parametrization != "symmetric":
        raise ValueError(f"theory.model.parametrization {parametrization!r} is not one of {PARAMETRIZATIONS}")
    u = jnp.triu(q, 1)
    return u + u.T


def attention(q, parametrization: str = "free") -> jnp.ndarray:
    """Row-wise softmax of the logits `[D, D]` (`logits`)."""
    return jax.nn.softmax(logits(q, parametrization), axis=-1)


def forward(params, x, activation: str = "cubic", parametrization: str = "free"):
    """f(X) `[n]` for inputs `[n, D, d]`."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"theory.model.activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    s = x @ params["v"]                                       # ⟨v, X_j⟩: [n, D]
    h = s @ attention(params["Q"], parametrization).T         # Σ_j A_ij ⟨v, X_j⟩: [n, D]
    return ACTIVATIONS[activation](h).sum(-1)


def logistic_loss(params, x, y, activation: str = "cubic", parametrization: str = "free"):
    """Mean of `log(1 + exp(−y f(X)))`."""
    return jnp.mean(jax.nn.softplus(-y * forward(params, x, activation, parametrization)))


def test_error(params, x, y, activation: str = "cubic", parametrization: str = "free") -> float:
    """Fraction of examples with `sign f(X) ≠ y` (0 counts as an error)."""
    return float(jnp.mean(jnp.sign(forward(params, x, activation, parametrization)) != y))


def set_masses(a, partition) -> np.ndarray:
    """`[D, L]`: attention mass of each row on each set."""
    a = np.asarray(a)
    return np.stack([a[:, s].sum(1) for s in np.asarray(partition)], axis=1)


def patch_association(a, partition, seed: int = 0) -> dict:
    """`{"purity", "own_set_mass", "ari"}` of an attention matrix `[D, D]` against the partition `[L, C]`."""
    partition = np.asarray(partition)
    m = set_masses(a, partition)
    owner = np.empty(partition.size, int)
    for ell, s in enumerate(partition):
        owner[s] = ell
    own = m[np.arange(len(m)), owner]
    clusters = KMeans(n_clusters=len(partition), n_init=10, random_state=seed).fit_predict(np.asarray(a).T)
    return {"purity": float(m.max(1).mean()), "own_set_mass": float(own.mean()),
            "ari": float(adjusted_rand_score(owner, clusters))}


def ideal_logits(partition, scale: float = 20.0) -> np.ndarray:
    """Block-"diagonal" logits: `scale` within a set, 0 across — each position attends (almost) only to its set."""
    partition = np.asarray(partition)
    d = partition.size
    q = np.zeros((d, d), np.float32)
    for s in partition:
        q[np.ix_(s, s)] = scale
    return q
