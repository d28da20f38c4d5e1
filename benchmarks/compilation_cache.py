"""Time to the first train step with JAX's persistent compilation cache, cold (empty cache) vs warm (a rerun).

    python benchmarks/compilation_cache.py [--config=configs/default.py] [--rounds=2] [--config.key=value …]

Each round runs `main.py` twice in fresh workdirs with one new cache folder: the first run compiles and fills the
cache, the second loads every program from it. Reported per run: the process's wall time for a 1-step run, the
time from the start of training to the first step (`first train step … since start` in its log), and `time/compile`
(the first train step's tracing + compiling or cache load) and `time/startup` (build, init) from
`final_metrics.json`. Extra `--config.*` flags go to every run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(config: str, workdir: str, cache: str, extra: list[str]) -> dict:
    """One 1-step run of `main.py`; returns its timings (seconds).

    Raises:
      RuntimeError: the run failed (with the end of its log).
    """
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    cmd = [sys.executable, "main.py", f"--config={config}", f"--workdir={workdir}", "--config.total_steps=1",
           "--config.optim.warmup_steps=0", "--config.save_checkpoints=False", "--config.tensorboard=False",
           f"--config.compilation_cache_dir={cache}", *extra]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    m = re.search(r"first train step compiled and dispatched in ([\d.]+) s \(([\d.]+) s since start\); "
                  r"persistent compilation cache: (\d+) hits", r.stderr)
    with open(os.path.join(workdir, "final_metrics.json")) as f:
        final = json.load(f)
    return {"process_wall_s": wall, "first_step_since_start_s": float(m.group(2)), "compile_s": final["time/compile"],
            "startup_s": final["time/startup"], "eval_s": final["time/eval"], "cache_hits": int(m.group(3))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/default.py")
    ap.add_argument("--rounds", type=int, default=2, help="cold + warm pairs (medians are reported)")
    args, extra = ap.parse_known_args(argv)
    rows = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="cc-bench-") as tmp:
        for i in range(args.rounds):
            cache = os.path.join(tmp, f"cache{i}")
            for kind in ("cold", "warm"):
                rows[kind].append(run_once(args.config, os.path.join(tmp, f"{kind}{i}"), cache, extra))
                print(f"round {i} {kind}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                         for k, v in rows[kind][-1].items()), flush=True)
            print(f"cache {cache}: {len(os.listdir(cache))} entries", flush=True)
    print(f"\nmedians over {args.rounds} rounds ({args.config} {' '.join(extra)}):")
    print("| run | process wall s | first step since start s | time/compile s | time/startup s | time/eval s |")
    print("|---|---|---|---|---|---|")
    for kind, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {kind} | {med['process_wall_s']:.1f} | {med['first_step_since_start_s']:.1f} | "
              f"{med['compile_s']:.2f} | {med['startup_s']:.1f} | {med['eval_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
