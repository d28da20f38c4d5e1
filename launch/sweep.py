"""Expand a sweep (a grid of config overrides) into runs, and run them locally or print their commands.

    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=runs/cifar_ablations            # print
    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=runs/cifar_ablations --run      # run all
    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py:steps=100 --root=… --run --only=permute
    python launch/sweep.py --sweep=… --root=gs://bucket/sweep --tpu=NAME,ZONE                               # TPU VM
    # Smoke sweep in minutes (4.3 min on 2 cores): sweep-level overrides that win over the sweep file's and every run's.
    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=runs/smoke --run --jobs=2 \
        --set=total_steps=20 --set=eval_every_steps=10 --set=data.eval_examples=256 --set=optim.warmup_steps=2 \
        --set=fewshot.train_examples=300 --set=fewshot.holdout_examples=100 --set=fewshot.test_examples=256

A sweep file defines `get_sweep(arg) -> dict(config=…, overrides={…}, runs=[{name, overrides, [config]}, …])`;
`grid(**axes)` builds the runs of a Cartesian product. Every run gets its own workdir `ROOT/<name>`; local runs go
one after another (`--jobs=N`: N at a time, each on its own 1/N of the CPU cores unless `--no-pin`), a finished run
(with `final_metrics.json`) is skipped, an interrupted one resumes. A `--set=total_steps=N` shows in the run names.

Before any run starts, every image-folder `data.root` the runs read must exist (else one `error:` line naming it and
the command that prepares it, exit 2). A run that exits 2 (a usage or config error: every run would fail the same
way) stops the sweep (exit 2); a run that exits 1 is reported with its `error:` line and the others go on (exit 1).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import itertools
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from vit_jax_struct import storage  # noqa: E402 -- after the repository root is importable


def _fmt(v) -> str:
    return str(v).replace("/", "-").replace(",", "+").replace(":", "") if v != "" else "none"


def grid(**axes) -> list[dict]:
    """Cartesian product of `key=[values]` → runs `{"name": "k1=v1,k2=v2", "overrides": {k1: v1, k2: v2}}`.

    Keys are config keys (`model.classifier`); the name uses their last component.
    """
    keys = list(axes)
    runs = []
    for values in itertools.product(*(axes[k] for k in keys)):
        overrides = dict(zip(keys, values, strict=True))
        name = ",".join(f"{k.split('.')[-1]}={_fmt(v)}" for k, v in overrides.items())
        runs.append({"name": name, "overrides": overrides})
    return runs


def load_sweep(spec: str) -> dict:
    """Loads `file.py[:arg]` and returns its `get_sweep(arg)`.

    Raises:
      ValueError: a run without a name, two runs of the same name, or a sweep without `config`.
    """
    path, _, arg = spec.partition(":")
    mod_spec = importlib.util.spec_from_file_location("sweep", path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, HERE)
    mod_spec.loader.exec_module(module)
    sweep = module.get_sweep(arg or None)
    if not sweep.get("config"):
        raise ValueError(f"sweep {spec!r} has no 'config'")
    names = [r.get("name") for r in sweep["runs"]]
    if not all(names) or len(set(names)) != len(names):
        raise ValueError(f"sweep {spec!r}: every run needs a unique name, got {names}")
    return sweep


def parse_sets(sets) -> dict:
    """`["key=value", …]` (the `--set` flags) → `{key: value}` (values stay strings, parsed by the config flags).

    Raises:
      ValueError: an entry without `=` or with an empty key.
    """
    out = {}
    for s in sets or ():
        key, eq, value = s.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--set {s!r} is not key=value (e.g. --set=total_steps=20)")
        out[key.strip().removeprefix("config.")] = value
    return out


def run_name(name: str, sets: dict | None) -> str:
    """The workdir name of a run under the `--set` overrides: a `total_steps` override replaces the `steps=N` the
    sweep's name carries (or is appended as `steps=N`), so a smoke root never looks like a full one."""
    steps = (sets or {}).get("total_steps")
    if steps is None:
        return name
    parts = name.split(",")
    if any(p.startswith("steps=") for p in parts):
        return ",".join(f"steps={steps}" if p.startswith("steps=") else p for p in parts)
    return f"{name},steps={steps}"


def commands(sweep: dict, root: str, python: str = sys.executable, multihost: bool = False,
             sets: dict | None = None) -> list[tuple]:
    """`[(name, workdir, argv)]` for every run.

    Override order (a later one wins): the sweep's shared `overrides`, the run's own, then `sets` (the command
    line's `--set`, for every run: e.g. a smoke sweep's `total_steps`, `eval_every_steps`, `data.eval_examples`).
    A `total_steps` set shows in the names (`run_name`).

    Raises:
      ValueError: two runs whose names coincide once `total_steps` is in them.
    """
    out = []
    for run in sweep["runs"]:
        name = run_name(run["name"], sets)
        workdir = storage.join(root, name)
        argv = [python, "main.py", f"--config={run.get('config', sweep['config'])}", f"--workdir={workdir}"]
        for k, v in {**sweep.get("overrides", {}), **run["overrides"], **(sets or {})}.items():
            argv.append(f"--config.{k}={v}")
        if multihost:
            argv.append("--config.multihost=True")
        out.append((name, workdir, argv))
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"with the --set overrides, runs share the names {dup}; run them in separate roots")
    return out


# The command that writes each dataset folder the sweeps read by default (data/<name> under the repository).
_PREPARE = {"cifar10": "python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-10-python.tar.gz --out={root}",
            "cifar100": "python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-100-python.tar.gz --out={root}"}


def missing_data(cmds) -> str | None:
    """The error line for the first image-folder `data.root` of the runs that does not exist (relative roots are
    the repository's, where the runs start), naming the folder, how many runs read it and the command that makes
    it; None when every root exists. Runs reading TFDS or a bucket are not checked here (the run checks them)."""
    roots = {}
    for _, _, argv in cmds:
        opts = dict(a[len("--config."):].split("=", 1) for a in argv if a.startswith("--config.") and "=" in a)
        root = opts.get("data.root", "")
        if root and opts.get("data.source", "folder") == "folder" and not storage.is_url(root):
            roots[root] = roots.get(root, 0) + 1
    for root, n in roots.items():
        path = root if os.path.isabs(root) else os.path.join(HERE, root)
        if os.path.isdir(path):
            continue
        base = os.path.basename(os.path.normpath(root)).lower().replace("-", "").replace("_", "")
        key = "cifar100" if "cifar100" in base else "cifar10" if "cifar10" in base else None
        where = root if os.path.isabs(root) else f"{root} ({path})"
        head = f"data.root {where} does not exist ({n} of the sweep's runs read it); "
        if key is None:
            return head + "expected an image folder root/{train,test}/<class>/*"
        return head + (f"make it with: {_PREPARE[key].format(root=root)} (the archive from "
                       "https://www.cs.toronto.edu/~kriz/cifar.html), or point the sweep at a copy: "
                       "--sweep=FILE:root=PATH")
    return None


def error_line(workdir: str) -> str | None:
    """The last `error:` line a run printed (its `console.txt`), without the `--traceback` hint; None if none."""
    path = os.path.join(workdir, "console.txt")
    try:
        with open(path, errors="replace") as f:
            lines = [line.rstrip("\n") for line in f if line.startswith("error: ")]
    except OSError:
        return None
    return lines[-1].replace("  (--traceback for the full trace)", "") if lines else None


def core_slots(jobs: int, cores=None) -> list[set[int]] | None:
    """The CPU cores of this process (`os.sched_getaffinity`, or `cores`) split into `jobs` disjoint contiguous sets,
    one per concurrent run (sizes differ by at most one); None when `jobs` < 2 or there are fewer cores than jobs.

    Two one-core runs on a 2-core CPU train more images per second together than two two-thread runs sharing both
    cores, or one after another with two threads each (XLA's thread pool takes the cores a process may use;
    docs/performance.md)."""
    cores = sorted(os.sched_getaffinity(0) if cores is None else cores)
    if jobs < 2 or len(cores) < jobs:
        return None
    size, extra = divmod(len(cores), jobs)
    out, i = [], 0
    for j in range(jobs):
        n = size + (j < extra)
        out.append(set(cores[i:i + n]))
        i += n
    return out


def gpu_count() -> int:
    """NVIDIA GPUs this process may use (`nvidia-smi -L`, narrowed by `CUDA_VISIBLE_DEVICES`); 0 without any."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = sum(line.startswith("GPU ") for line in out.splitlines())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = min(n, len([v for v in visible.split(",") if v.strip()]))
    return n


def slot_envs(jobs: int, gpus: int, memory: float = 0.9) -> list[dict]:
    """The environment of each of `jobs` concurrent runs: on `gpus` GPUs, slot j runs on GPU j mod `gpus`
    (`CUDA_VISIBLE_DEVICES`) and takes its share of that GPU's memory, `memory` / (runs on the GPU)
    (`XLA_PYTHON_CLIENT_MEM_FRACTION`: JAX preallocates that fraction, so N processes fit side by side); with no GPU
    (or one run at a time) nothing is set.

    Small models leave most of an accelerator idle: several runs on one GPU train more images per second in all."""
    if not gpus or jobs < 2:
        return [{} for _ in range(jobs)]
    per_gpu = [sum(1 for j in range(jobs) if j % gpus == g) for g in range(gpus)]
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()] or \
        [str(g) for g in range(gpus)]
    return [{"CUDA_VISIBLE_DEVICES": visible[j % gpus],
             "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{memory / per_gpu[j % gpus]:.3f}"} for j in range(jobs)]


def checkpoint_step(workdir: str) -> int:
    """The newest step saved under `workdir/checkpoints/` (Orbax's step-numbered folders; its unfinished
    `<step>.orbax-checkpoint-tmp-…` folders are not counted), 0 when there is none: the step a run started in
    `workdir` resumes from."""
    try:
        return max((int(n) for n in os.listdir(os.path.join(workdir, "checkpoints")) if n.isdigit()), default=0)
    except OSError:
        return 0


def throughput_line(workdirs: list[str], started: float, ended: float, jobs: int,
                    resumed_from: dict[str, int] | None = None) -> str | None:
    """`[sweep] aggregate: …` — the images trained by the runs of `workdirs` that finished in this invocation (their
    `final_metrics.json` written after `started`: (step − `resumed_from[workdir]`) × batch, so a run resumed from a
    checkpoint counts only the steps it trained here), divided by the sweep's wall time, with each run's own
    `train/images_per_sec`; None when no run finished here. Compares `--jobs` settings on one machine."""
    images, rates, resumed = 0, [], 0
    for wd in workdirs:
        try:
            if storage.is_url(wd) or os.path.getmtime(os.path.join(wd, "final_metrics.json")) < started:
                continue
            with open(os.path.join(wd, "final_metrics.json")) as f:
                final = json.load(f)
            with open(os.path.join(wd, "config.json")) as f:
                batch = json.load(f)["batch_size"]
        except (OSError, ValueError, KeyError):
            continue
        first = (resumed_from or {}).get(wd, 0)
        resumed += first > 0
        images += max(final["step"] - first, 0) * batch
        rates.append(final.get("train/images_per_sec") or 0.0)
    if not rates:
        return None
    wall = max(ended - started, 1e-9)
    note = f", {resumed} of them resumed: their steps before this invocation not counted" if resumed else ""
    return (f"[sweep] aggregate: {len(rates)} run(s) finished here{note}, {images:,} training images in "
            f"{wall:,.0f} s = "
            f"{images / wall:,.0f} img/s with --jobs={jobs} (each run's own train rate: "
            f"{min(rates):,.0f}–{max(rates):,.0f} img/s)")


def run_one(name: str, workdir: str, cmd: list, cores: set[int] | None = None, env: dict | None = None) -> int:
    """Runs one sweep run to completion (skipped when its `final_metrics.json` exists; an interrupted run resumes),
    its console output (stdout and stderr: tracebacks, native crashes) appended to `workdir/console.txt` — the run
    writes its own `workdir/log.txt`; returns its exit status. `cores`: the CPU cores the run may use (its
    affinity; None: all of this process's); `env`: variables added to its environment (`slot_envs`)."""
    if storage.exists(storage.join(workdir, "final_metrics.json")):
        print(f"[sweep] {name}: done, skipped", flush=True)
        return 0
    # The run's console output: in its workdir, or beside the sweep for a gs:// root (an object cannot be appended
    # to; the run's own log.txt is in the bucket).
    log_path = os.path.join(HERE, "runs", "sweep_logs", f"{name}.txt") if storage.is_url(workdir) else \
        os.path.join(workdir, "console.txt")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    where = (f" on cores {sorted(cores)}" if cores else "") + \
        (f" on GPU {env['CUDA_VISIBLE_DEVICES']} ({env['XLA_PYTHON_CLIENT_MEM_FRACTION']} of its memory)"
         if env and "CUDA_VISIBLE_DEVICES" in env else "")
    print(f"[sweep] {name}: running{where} ({shlex.join(cmd)}), log {log_path}", flush=True)
    with open(log_path, "a") as log:
        rc = subprocess.call(cmd, cwd=HERE, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                             preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
    print(f"[sweep] {name}: exit {rc}" + (" (pre-empted: rerun the sweep to resume it)" if rc == 143 else ""),
          flush=True)
    return rc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", required=True, help="sweep file[:arg]")
    ap.add_argument("--root", required=True, help="folder for the runs' workdirs")
    ap.add_argument("--run", action="store_true", help="run locally (one after another, or --jobs at a time)")
    ap.add_argument("--only", action="append", default=[],
                    help="only runs whose name contains this (repeatable: runs matching any of them)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="with --run: how many runs at a time (in the sweep's order; each one a process). On a CPU "
                         "host each gets its share of the cores (--pin); on a GPU host each its share of a GPU's "
                         "memory, the runs spread over the GPUs (slot_envs). A TPU host: keep 1")
    ap.add_argument("--gpus", type=int, default=-1,
                    help="GPUs to spread --jobs over (-1: those nvidia-smi lists; 0: none, CPU runs)")
    ap.add_argument("--gpu_memory", type=float, default=0.9,
                    help="on GPUs: the fraction of each GPU's memory this sweep's runs share (default 0.9; two "
                         "sweeps side by side on one GPU: 0.45 each)")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                    help="with --jobs=N > 1: each run on its own 1/N of the CPU cores (default; --no-pin: every run "
                         "on all cores)")
    ap.add_argument("--tpu", default="", help="NAME,ZONE: print launch/tpu_vm.sh commands for a TPU VM")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for every run, winning over the sweep's (repeatable)")
    args = ap.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
        cmds = [c for c in commands(sweep, args.root, multihost=bool(args.tpu), sets=parse_sets(args.set))
                if not args.only or any(o in c[0] for o in args.only)]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not cmds:
        ap.error(f"no run of the sweep matches --only {' or '.join(map(repr, args.only))}")
    if args.tpu:
        name, zone = args.tpu.split(",")
        for _, workdir, cmd in cmds:
            config = cmd[2].split("=", 1)[1]
            flags = " ".join(shlex.quote(a) for a in cmd[4:-1])
            print(f"launch/tpu_vm.sh run {name} {zone} {config} {workdir} {flags}")
        return 0
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs} must be ≥ 1")
    if not 0 < args.gpu_memory <= 1:
        ap.error(f"--gpu_memory {args.gpu_memory} must be in (0, 1]")
    if not args.run:
        for _, _, cmd in cmds:
            print(shlex.join(cmd))
        return 0
    problem = missing_data(cmds)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    slots = queue.Queue()
    envs = slot_envs(args.jobs, gpu_count() if args.gpus < 0 else args.gpus, args.gpu_memory)
    for cores, env in zip((core_slots(args.jobs) if args.pin else None) or [None] * args.jobs, envs, strict=True):
        slots.put((cores, env))
    stop = threading.Event()  # set by a run that exits 2: a usage or config error, the same for every run

    def run_in_slot(c):
        if stop.is_set():
            return None
        slot = slots.get()  # a free share of the cores / GPU (the run that held it has finished)
        try:
            if stop.is_set():
                return None
            rc = run_one(*c, cores=slot[0], env=slot[1])
        finally:
            slots.put(slot)
        if rc:
            line = error_line(c[1]) if not storage.is_url(c[1]) else None
            print(f"[sweep] {c[0]}: {line or f'exit {rc}, see its console.txt'}", file=sys.stderr, flush=True)
            if rc == 2:
                stop.set()
        return rc

    resumed_from = {wd: checkpoint_step(wd) for _, wd, _ in cmds if not storage.is_url(wd)}
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rcs = list(pool.map(run_in_slot, cmds))
    line = throughput_line([c[1] for c, rc in zip(cmds, rcs, strict=True) if rc is not None], started,
                           time.time(), args.jobs, resumed_from)
    if line:
        print(line, flush=True)
    failed = [name for (name, _, _), rc in zip(cmds, rcs, strict=True) if rc]
    skipped = sum(rc is None for rc in rcs)
    if stop.is_set():
        print(f"error: a run exited 2 (a usage or config error: every run of the sweep would fail the same way); "
              f"stopped the sweep, {skipped} run(s) not started", file=sys.stderr)
        return 2
    if failed:
        print(f"[sweep] failed runs: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
