#!/usr/bin/env python3
"""Times kiln_bench of two builds in one run and prints, per row, the ratio after / before.

For "no performance regression" checks: build kiln_bench at the old commit in a worktree, e.g.
  git worktree add --detach ../before <commit>
  (cd ../before && cmake --preset default && cmake --build --preset default --target kiln_bench)
then
  benchmarks/compare_builds.py ../before/build/default build/default [--rounds 3]

The two programs run alternately (before, after, before, ...) for --rounds rounds, each with
KILN_NUM_THREADS=2 (KILN_CACHE_DIR and KILN_DUMP unset, as run_peers.py), so drift of the
machine (other load, clocks) hits both alike; each row keeps its best time over all rounds and
repetitions. A ratio above 1 + --noise (default 10%) is marked "slower" and makes the exit
status 1. To see the machine's own noise, pass one build folder twice.
"""

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_peers import THREADS, kiln_times, load, run_json  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="build folder of the old commit (has benchmarks/kiln_bench)")
    parser.add_argument("after", help="build folder of the new commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--min-time", default="0.3")
    parser.add_argument("--filter", default="", help="--benchmark_filter for both programs")
    parser.add_argument("--noise", type=float, default=0.10)
    options = parser.parse_args()

    env = dict(os.environ, KILN_NUM_THREADS=str(THREADS))
    env.pop("KILN_CACHE_DIR", None)
    env.pop("KILN_DUMP", None)
    best = {"before": {}, "after": {}}
    load_before = load()
    for _ in range(options.rounds):
        for label in ("before", "after"):
            program = pathlib.Path(getattr(options, label)) / "benchmarks" / "kiln_bench"
            command = [program, "--benchmark_format=json",
                       f"--benchmark_repetitions={options.repetitions}",
                       f"--benchmark_min_time={options.min_time}"]
            if options.filter:
                command.append(f"--benchmark_filter={options.filter}")
            for name, seconds in kiln_times(run_json(command, env=env)).items():
                if isinstance(seconds, str):
                    best[label][name] = seconds
                elif not isinstance(best[label].get(name, 0.0), str):
                    best[label][name] = min(seconds, best[label].get(name, seconds))
    print(f"kiln_bench, best of {options.rounds} rounds x {options.repetitions} repetitions, "
          f"{THREADS} threads; load average before: {load_before}, after: {load()}")
    print(f"| row | before | after | after / before |\n| --- | --- | --- | --- |")
    slower = 0
    for name in best["before"]:
        old, new = best["before"][name], best["after"].get(name, "missing")
        if isinstance(old, str) or isinstance(new, str):
            print(f"| {name} | {old} | {new} | — |")
            continue
        ratio = new / old
        mark = " slower" if ratio > 1 + options.noise else ""
        slower += bool(mark)
        print(f"| {name} | {old * 1e3:.4g} ms | {new * 1e3:.4g} ms | {ratio:.2f}{mark} |")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
