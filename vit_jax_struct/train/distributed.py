"""Multi-process start-up: join every process of a run, check that all joined, or fail in bounded time.

`initialize(config.distributed)` (called by `main.py` with `--config.multihost=True`, before anything else touches
JAX) runs `jax.distributed.initialize` and then checks, in the global device table and through one cross-process
all-gather, that `jax.process_count()` processes with the distinct indices `0 … n-1` are up, each with the same number
of local devices. Only process 0 keeps absl INFO logging; the others log warnings and errors only (metric files,
`config.json` and `final_metrics.json` are written by process 0 in the trainer).

Keys of `config.distributed` (`""`, `0`, `-1` = taken from the environment by `jax.distributed.initialize`: Cloud TPU
VM metadata, SLURM, Open MPI, `JAX_COORDINATOR_ADDRESS`, …):

- `coordinator_address`: `"host:port"` of process 0, which runs the coordination service.
- `num_processes`: how many processes (one per host) make up the run.
- `process_id`: this process's index in `[0, num_processes)`.
- `initialization_timeout`: seconds to wait for all processes to join (and for the check after it); default 1,800 s,
  as large pods use (JAX's own default, 300 s, is short for a pod whose hosts start minutes apart).

Why a thread: when a process is missing, the library's own `initialization_timeout` ends in an abort of the C++
coordination client (`SIGABRT`, "DEADLINE_EXCEEDED … RegisterTask"), which Python cannot catch. Connecting in a
daemon thread, with the library's deadline set past ours, lets the main thread raise a `TimeoutError` that names the
coordinator, the expected process count and this process's id (checked with jax 0.10.2; the connect call releases
the GIL).

On CPU (tests, or a demo of two processes on one machine) every process needs its own fake devices, e.g.
`XLA_FLAGS=--xla_force_host_platform_device_count=4`; cross-process CPU collectives use gloo (the default of
`jax_cpu_collectives_implementation`). Gloo gives the processes a fixed 30 s to meet at each new collective (set up
on first use, e.g. the first train step), so CPU processes must compile at a similar pace: no persistent compilation
cache there (jax writes it from process 0 only, so process 1 recompiles while process 0 waits).

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python main.py --config=configs/default.py --workdir=runs/mh \\
      --config.multihost=True --config.distributed.coordinator_address=127.0.0.1:12345 \\
      --config.distributed.num_processes=2 --config.distributed.process_id=0     # and process_id=1 in a second shell
"""

from __future__ import annotations

import collections
import threading
import time

import jax
import numpy as np
from absl import logging

# The library's own deadline lies this far past ours, so our clear error comes first (its abort is uncatchable).
_LIBRARY_GRACE_S = 60


def _settings(dist_config) -> dict:
    """`config.distributed` -> keyword arguments of `jax.distributed.initialize` (None: from the environment).

    Raises:
      ValueError: a negative `num_processes`, a `process_id` below -1, or a `process_id` not below `num_processes`,
        or a non-positive `initialization_timeout`.
    """
    cfg = dict(dist_config or {})
    address = cfg.get("coordinator_address") or None
    num = int(cfg.get("num_processes", 0))
    pid = int(cfg.get("process_id", -1))
    timeout = float(cfg.get("initialization_timeout", 1800))
    if num < 0:
        raise ValueError(f"config.distributed.num_processes {num} must be positive (0: from the environment)")
    if pid < -1 or (num and pid >= num):
        raise ValueError(f"config.distributed.process_id {pid} must be in [0, {num or 'num_processes'}) "
                         "(-1: from the environment)")
    if timeout <= 0:
        raise ValueError(f"config.distributed.initialization_timeout {timeout:g} must be positive (seconds)")
    return {"coordinator_address": address, "num_processes": num or None, "process_id": None if pid < 0 else pid,
            "initialization_timeout": timeout}


def check_joined(expected: int | None, found_indices, found_local_devices) -> None:
    """Raises unless `found_indices` is a permutation of `range(expected)` and all hosts have the same device count.

    Args:
      expected: the process count the run was configured (or auto-detected) with; None: `jax.process_count()`.
      found_indices: `[n]` process indices gathered from every process.
      found_local_devices: `[n]` local device counts gathered from every process (same order).

    Raises:
      RuntimeError: naming the expected processes and what was found.
    """
    found_indices = [int(i) for i in np.asarray(found_indices).ravel()]
    devs = [int(d) for d in np.asarray(found_local_devices).ravel()]
    n = jax.process_count() if expected is None else int(expected)
    problems = []
    if jax.process_count() != n:
        problems.append(f"jax.process_count() is {jax.process_count()}")
    if sorted(found_indices) != list(range(n)):
        problems.append(f"the process indices are {found_indices}, not a permutation of 0..{n - 1}")
    if len(set(devs)) > 1:
        problems.append(f"the processes have different local device counts {devs} (indices {found_indices}); "
                        "give every host the same accelerators (or XLA_FLAGS device count on CPU)")
    if problems:
        raise RuntimeError(f"distributed start-up: expected {n} processes with indices 0..{n - 1}, but "
                           + "; ".join(problems))


def _gather_and_check(expected: int | None) -> None:
    from jax.experimental import multihost_utils

    # First from the global device table (no collective; unequal device counts would break the all-gather) ...
    per_process = collections.Counter(d.process_index for d in jax.devices())
    check_joined(expected, sorted(per_process), [per_process[i] for i in sorted(per_process)])
    # ... then from every process itself, which also proves that cross-process collectives work.
    mine = np.array([jax.process_index(), jax.local_device_count()], np.int32)
    table = np.asarray(multihost_utils.process_allgather(mine))  # [n, 2]; first cross-process collective
    check_joined(expected, table[:, 0], table[:, 1])


def initialize(dist_config=None) -> None:
    """Joins this process to the run (`jax.distributed.initialize`) and checks that every process joined.

    Args:
      dist_config: `config.distributed` (see the module docstring); None: everything from the environment, 1,800 s.

    Raises:
      ValueError: bad `config.distributed` values.
      TimeoutError: not every process joined within `initialization_timeout` (one line naming the coordinator, the
        expected count and the process that waited), or the check after joining did not finish within the remaining
        time (naming the processes that joined).
      RuntimeError: the library failed (e.g. no coordinator address in the environment), or the processes that
        joined are not `0 … n-1` with equal local device counts (`check_joined`).
    """
    s = _settings(dist_config)
    timeout = s.pop("initialization_timeout")
    stage, error = ["joining"], []

    def work():
        try:
            jax.distributed.initialize(**s, initialization_timeout=int(timeout) + _LIBRARY_GRACE_S)
            stage[0] = "checking"
            _gather_and_check(s["num_processes"])
            stage[0] = "done"
        except BaseException as e:  # Re-raised in the calling thread.
            error.append(e)

    start = time.time()
    logging.info("jax.distributed.initialize(coordinator=%s, num_processes=%s, process_id=%s), timeout %g s",
                 s["coordinator_address"] or "<from environment>", s["num_processes"] or "<from environment>",
                 "<from environment>" if s["process_id"] is None else s["process_id"], timeout)
    thread = threading.Thread(target=work, name="jax-distributed-initialize", daemon=True)
    thread.start()
    thread.join(timeout)
    where = (f"coordinator {s['coordinator_address'] or '<from environment>'}, expected "
             f"{s['num_processes'] or '<from environment>'} processes, this process id "
             f"{'<from environment>' if s['process_id'] is None else s['process_id']}")
    def joined():
        """The processes known to have joined: after joining, the global device table; before, only this one (the
        coordination service does not tell a waiting client who else registered)."""
        if stage[0] == "joining":
            return "; which processes did register is known only to the coordinator, not to a waiting client"
        try:
            return f"; joined: processes {sorted({d.process_index for d in jax.devices()})}"
        except Exception:  # the backend itself may be what hangs
            return ""

    if thread.is_alive():
        what = ("not every process joined the coordination service" if stage[0] == "joining" else
                "the processes joined but the first cross-process collective (process index all-gather) did not "
                "complete")
        raise TimeoutError(
            f"distributed start-up timed out after {time.time() - start:.0f} s "
            f"(config.distributed.initialization_timeout={timeout:g}): {what} ({where}{joined()}). Start every "
            "process with the same coordinator_address and num_processes and distinct process_id, check that the "
            "coordinator's port is reachable, or raise config.distributed.initialization_timeout.")
    if error:
        if isinstance(error[0], RuntimeError) and str(error[0]).startswith("distributed start-up"):
            raise error[0]
        raise RuntimeError(f"distributed start-up failed while {stage[0]} ({where}): "
                           f"{type(error[0]).__name__}: {error[0]}") from error[0]
    if jax.process_index() != 0:
        logging.set_verbosity(logging.WARNING)  # One log for the run: process 0's.
    logging.info("distributed: %d processes, %d devices (%d per process), this is process %d, %.1f s to join",
                 jax.process_count(), jax.device_count(), jax.local_device_count(), jax.process_index(),
                 time.time() - start)
