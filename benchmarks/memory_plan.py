r"""Per-device HBM of a config's real train step on a TPU slice, compiled ahead of time on this CPU-only machine.

    python benchmarks/memory_plan.py --config=configs/vit_l16.py --topology=v4:2x2x1 --batch=256 \
        --config.model.remat_policy=nothing_saveable
    python benchmarks/memory_plan.py --config=configs/vit_h14.py --topology=v5p:4x4x4 --out=runs/scaling.jsonl
    python benchmarks/memory_plan.py --render=runs/scaling.jsonl > table.md       # markdown table of the records

`--backend=tpu` (default) needs libtpu (`pip install -r requirements-tpu.txt`, the `jax[tpu]` extra): the slice
comes from `jax.experimental.topologies.get_topology_desc(topology_name=…, platform="tpu")` — compile-only TPU
devices, no TPU needed — and the step of `trainer.build(config, devices)` (data sources replaced by noise) is
lowered with `ShapeDtypeStruct` inputs that carry the state and batch shardings (nothing is allocated) and compiled
by the TPU compiler. `compiled.memory_analysis()` then gives the bytes one device holds: arguments (the state and
the batch shard), outputs, aliased (outputs written into donated argument buffers), temporaries (activations, gradients
and other scratch), generated code; total = arguments + outputs − aliased + temporaries + code, compared with the
chip's HBM (`benchmarks/common.py:HBM_BYTES`). A program whose temporaries exceed the chip's HBM may be refused by
the TPU compiler ("Ran out of memory on HBM"): that is reported (and recorded) as not fitting, with the compiler's
figures.

Topology names the installed libtpu (0.0.42) accepts: `v3:AxB` (2 devices per chip), `v4:AxBxC` (compiled as
megacore, 1 device per chip like a real v4 VM), `v5e:AxB` (`v5litepod:AxB` is rewritten to it), `v5p:AxBxC`
(megacore), `v6e:AxB`. Multi-host slices (e.g. v4:4x4x4, 16 hosts) compile here as one program.

`--backend=cpu` compiles the same step for as many fake CPU devices as the slice has (XLA_FLAGS
--xla_force_host_platform_device_count): a rough fallback without libtpu. Its numbers are the CPU compiler's, not
the TPU's: its buffer assignment and scheduling differ, and it is known not to reflect rematerialisation (ViT-L/16,
batch 256 on 4 devices: 19.8 GiB of temporaries with and without per-block remat, versus 6.2 GiB from the TPU
compiler with remat), so use it for argument/state sizes, not to judge remat.

`--out=FILE.jsonl` appends one JSON line per run (the command, the resolved settings and the figures);
`--render=FILE.jsonl` prints them as the markdown table of docs/scaling.md.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags
from ml_collections import config_flags

from benchmarks import common

_CONFIG = config_flags.DEFINE_config_file("config", "configs/vit_l16.py", "Config file (file.py[:arg]).",
                                          lock_config=True)
_TOPOLOGY = flags.DEFINE_string("topology", "v4:2x2x1", "TPU slice, '<version>:<chips per axis>', e.g. v4:2x2x1, "
                                "v5e:4x4, v5p:2x2x2.")
_BACKEND = flags.DEFINE_enum("backend", "tpu", ["tpu", "cpu"], "tpu: libtpu's compile-only devices for the "
                             "topology; cpu: as many fake CPU devices (cannot judge remat).")
_BATCH = flags.DEFINE_integer("batch", 0, "Global batch (images); 0: the config's batch_size.")
_OUT = flags.DEFINE_string("out", "", "Append the results as one JSON line to this file.")
_RENDER = flags.DEFINE_string("render", "", "Print the records of this JSONL file as a markdown table and exit.")

def _settings(config) -> dict:
    m = config.model
    return dict(variant=m.get("variant") or m.get("name"), image_size=config.data.image_size,
                batch=config.batch_size, accum_steps=int(config.get("accum_steps", 1)),
                remat_policy=m.get("remat_policy", "none"), scan=bool(m.get("scan", False)),
                dtype=m.get("dtype", "float32"), mu_dtype=config.optim.get("mu_dtype") or "float32",
                mesh_config=dict(config.mesh))


def _command(argv: list[str]) -> str:
    keep = [a for a in argv[1:] if not a.startswith(("--out=", "--render="))]
    return " ".join(["python benchmarks/memory_plan.py", *(shlex.quote(a) for a in keep)])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if _RENDER.value:
        print(common.render(_RENDER.value))
        return
    topology = common.parse_topology(_TOPOLOGY.value)
    if "jax" in sys.modules:
        raise RuntimeError("JAX was imported before the backend was chosen; import it inside main()")
    if _BACKEND.value == "cpu":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count="
                                   f"{topology['devices']}").strip()
    # The compile-only TPU devices need no TPU backend; keep JAX on the CPU and let libtpu load beside another
    # process that holds /tmp/libtpu_lockfile.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax

    config = _CONFIG.value
    if _BATCH.value:
        config.batch_size = _BATCH.value
    settings = _settings(config)
    print(f"{settings['variant']} at {settings['image_size']} px, global batch {settings['batch']} on "
          f"{topology['name']} ({topology['chips']} chips, {topology['devices']} devices, backend {_BACKEND.value}); "
          f"mesh {settings['mesh_config']}, accum_steps {settings['accum_steps']}, remat {settings['remat_policy']}, "
          f"scan {settings['scan']}, dtype {settings['dtype']}, Adam mu {settings['mu_dtype']}", flush=True)
    result = common.plan(config, topology, _BACKEND.value)
    mem = result["memory"]
    print(f"mesh {result['mesh']}, {result['per_device_batch']} images per device per step; compiled in "
          f"{result['compile_s']:.1f} s (" + ", ".join(f"{k} {v:.1f} s" for k, v in result["seconds"].items()) + ")")
    if result["oom"]:
        print(f"does NOT fit: the TPU compiler refused it: {result['oom']['message']}")
    elif mem is None:
        print("memory_analysis() is not available on this backend")
    else:
        for k in ("arguments", "outputs", "aliased", "temporaries", "generated_code", "total"):
            print(f"  {k:<15} {mem[k] / common.GiB:8.2f} GiB per device")
        hbm = result["hbm"]
        verdict = "fits" if result["fits"] else "does NOT fit"
        print(f"{verdict} in {topology['version']} HBM ({hbm / common.GiB:.1f} GiB per device; "
              f"{100 * mem['total'] / hbm:.0f} % used)")
    if _BACKEND.value == "cpu":
        print("note: fake CPU devices: the CPU compiler's buffer sizes; they cannot judge remat (use --backend=tpu)")
    if _OUT.value:
        record = dict(time=time.strftime("%Y-%m-%dT%H:%M:%S"), command=_command(sys.argv),
                      config=common.config_arg_string(), overrides=common.config_overrides(),
                      topology=topology["name"], chips=topology["chips"], backend=_BACKEND.value, **settings,
                      **result, jax=jax.__version__)
        os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
        with open(_OUT.value, "a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    app.run(main)
