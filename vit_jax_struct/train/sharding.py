"""Device mesh `('data', 'fsdp')` and regex sharding rules for parameters and optimizer state.

The batch is split over both axes (every device holds a distinct slice of the batch); parameters and optimizer
state are replicated or sharded over `'fsdp'` (ZeRO-3 / FSDP, Rajbhandari et al. 2020) according to regex rules on
their tree paths. With `AxisType.Auto` axes, plain `jax.jit` + `NamedSharding` lets XLA's SPMD partitioner insert
the all-gathers and reduce-scatters.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

MESH_AXES = ("data", "fsdp")
BATCH_SPEC = P(MESH_AXES)
# Logical activation axes of the models (`vit.ACT_TOKENS`, `vit.ACT_MLP`) -> mesh axes: the batch over every device,
# tokens and features unsharded (big_vision's `act_batch` rule).
ACTIVATION_RULES = (("act_batch", MESH_AXES), ("act_len", None), ("act_emb", None), ("act_mlp", None))


def create_mesh(mesh_config, devices: Sequence | None = None) -> jax.sharding.Mesh:
    """Builds a `('data', 'fsdp')` mesh with `AxisType.Auto` axes.

    Args:
      mesh_config: mapping with integer `data` and `fsdp` sizes; at most one may be -1 (= all remaining devices).
        If both are explicit and their product is smaller than the device count (single process only), the first
        `data * fsdp` devices are used.
      devices: devices to use (default `jax.devices()`, all processes).

    Raises:
      ValueError: unknown axis names, more than one -1, or sizes that do not fit the device count.
    """
    devices = list(jax.devices() if devices is None else devices)
    cfg = dict(mesh_config)
    unknown = sorted(set(cfg) - set(MESH_AXES))
    if unknown:
        raise ValueError(f"config.mesh has unknown axes {unknown}; allowed: {list(MESH_AXES)}")
    sizes = [int(cfg.get(a, 1)) for a in MESH_AXES]
    if sizes.count(-1) > 1:
        raise ValueError(f"config.mesh {cfg} has more than one -1 axis")
    if any(s == 0 or s < -1 for s in sizes):
        raise ValueError(f"config.mesh {cfg}: sizes must be positive or -1")
    n = len(devices)
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if n % known:
            raise ValueError(f"config.mesh {cfg}: {n} devices are not divisible by {known}")
        sizes[sizes.index(-1)] = n // known
    total = math.prod(sizes)
    if total > n or (total < n and jax.process_count() > 1):
        raise ValueError(f"config.mesh {dict(zip(MESH_AXES, sizes, strict=False))} needs {total} devices; there are {n}"
                         + (" (all must be used in a multi-process run)" if jax.process_count() > 1 else ""))
    return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices[:total])


@contextlib.contextmanager
def activation_sharding(mesh) -> Iterator[None]:
    """Context in which the models' logical activation constraints (`flax.linen.with_logical_constraint`) shard
    the batch dimension over every device of `mesh` (`ACTIVATION_RULES`). Enter it inside the function being
    traced (`jax.jit`'s body), so the constraints are part of the compiled program wherever it is called; as a
    decorator (`@activation_sharding(mesh)`, `contextlib.ContextDecorator`) it wraps the whole body. On a
    one-device mesh it does nothing.

    Why: with FSDP the parameters are sharded over 'fsdp', the same axis that splits the batch; without these
    constraints the partitioner may resolve a matmul by gathering the activations (batch dimension unsharded on
    'fsdp') instead of the weights, which inside `nn.scan`'s loop made temporaries grow with the FSDP degree (see
    docs/scaling.md). Outside this context the constraints are no-ops (analysis, tests on one device).
    """
    if mesh.devices.size == 1:  # Nothing to shard: leave the single-device program without constraints.
        yield
        return
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(ACTIVATION_RULES):
        yield


def tree_paths(tree) -> list[str]:
    """'/'-joined key paths of a pytree's leaves, e.g. `params/Transformer/encoderblock_0/LayerNorm_0/scale`."""
    return [path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def path_str(path) -> str:
    """One key path as a '/'-joined string (dict keys, attribute names and sequence indices)."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _fsdp_spec(shape, axis_size: int) -> P:
    """Shards the largest dimension divisible by `axis_size` over 'fsdp' (big_vision's fsdp); else replicates."""
    if axis_size == 1 or not shape:
        return P()
    for dim in np.argsort(shape)[::-1]:
        if shape[dim] % axis_size == 0 and shape[dim] >= axis_size:
            spec = [None] * len(shape)
            spec[dim] = "fsdp"
            return P(*spec)
    return P()


def partition_specs(abstract_tree, rules: Sequence[tuple[str, str]], mesh) -> object:
    """PartitionSpecs for every leaf by the first rule whose regex `re.search`es the leaf's path.

    Args:
      abstract_tree: pytree of arrays or `ShapeDtypeStruct`s (e.g. the whole train state: optimizer moments have
        the parameter's path as a suffix, so one rule covers both).
      rules: `(regex, action)` pairs, action `'fsdp'` (shard the largest divisible dimension over 'fsdp') or
        `'replicate'`. Leaves no rule matches are replicated.
      mesh: the mesh (for the 'fsdp' axis size).

    Raises:
      ValueError: an unknown action.
    """
    for pattern, action in rules:
        if action not in ("fsdp", "replicate"):
            raise ValueError(f"sharding rule ({pattern!r}, {action!r}): action is not one of 'fsdp', 'replicate'")
    fsdp = mesh.shape["fsdp"]

    def spec(path, leaf):
        name = path_str(path)
        for pattern, action in rules:
            if re.search(pattern, name):
                return _fsdp_spec(tuple(leaf.shape), fsdp) if action == "fsdp" else P()
        return P()

    return jax.tree_util.tree_map_with_path(spec, abstract_tree)


def shardings(abstract_tree, rules, mesh):
    """`NamedSharding`s for `abstract_tree` by `partition_specs`."""
    return jax.tree.map(lambda s: NamedSharding(mesh, s), partition_specs(abstract_tree, rules, mesh))


def check_batch_size(global_batch: int, mesh, what: str = "config.batch_size") -> int:
    """Returns the per-process batch size; the global batch must split evenly over devices and processes.

    Raises:
      ValueError: naming the batch size, the device count and the mesh.
    """
    n = mesh.devices.size
    if global_batch <= 0 or global_batch % n:
        raise ValueError(f"{what} {global_batch} is not divisible by the number of devices {n} "
                         f"(mesh data={mesh.shape['data']} x fsdp={mesh.shape['fsdp']}); use a multiple of {n}")
    if global_batch % jax.process_count():
        raise ValueError(f"{what} {global_batch} is not divisible by the process count {jax.process_count()}")
    return global_batch // jax.process_count()


def one_program_in_flight(mesh) -> bool:
    """True on a mesh of several CPU devices (a simulated mesh, `--xla_force_host_platform_device_count`): there the
    loops wait for each sharded program before dispatching the next.

    XLA runs every CPU device's program on one shared thread pool, and a collective holds a pool thread until all
    devices have joined it. With programs queued ahead, the devices that finished program t block threads in program
    t+1's all-reduce while a device still in program t waits for a thread, and XLA aborts after 40 s ("Expected 8
    threads to join the rendezvous, but only 7 of them arrived"; seen with the in-memory input, whose host side runs
    far ahead, on a loaded 2-core machine). Accelerators keep the asynchronous dispatch."""
    return mesh.devices.size > 1 and mesh.devices.flat[0].platform == "cpu"


def global_batch(local_batch: dict, mesh):
    """Host-local numpy batch -> global `jax.Array`s sharded over all mesh axes on the batch dimension."""
    sh = NamedSharding(mesh, BATCH_SPEC)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sh, x), local_batch)
