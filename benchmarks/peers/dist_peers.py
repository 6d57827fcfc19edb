#!/usr/bin/env python3
"""kiln::dist's figures (issue #16): runs dist_bench in the two configurations of one 2-core
machine and prints the tables of docs/performance.md "Data-parallel training (issue #16)".

    cmake --build --preset default --target dist_bench
    benchmarks/peers/dist_peers.py [--build build/default] [--min-time 1] [--json FILE]

  1 x 2   one process, KILN_NUM_THREADS=2 (no mpirun: Open MPI's singleton, world size 1): the
          training steps on the whole global batch, the plain single-graph step and the
          data-parallel step's phases on a world of one
  2 x 1   mpirun -np 2, KILN_NUM_THREADS=1 per rank: all_reduce (kiln's ProcessGroup path beside
          a plain MPI_Allreduce loop, Open MPI's own figure) and the training steps on half the
          global batch per rank
all_reduce figures are the best of 3 loops of --min-time / 3 each (other work on a shared machine
only adds time); step figures are medians over --min-time of steps.

Open MPI runs as in tests/dist/CMakeLists.txt: the two variables that let root run mpirun,
btl self,vader (shared memory), oversubscription allowed. Debian 12 packages neither the OSU
micro-benchmarks nor Intel's IMB, so the MPI reference is dist_bench's own MPI_Allreduce loop.

The scaling model fits a latency alpha and a per-byte beta to the 2-rank all_reduce times
(2 ranks: t = 2 alpha + n beta; beta the slope over 1 MiB and up, alpha half of 4 KiB's) and
predicts a ring all-reduce of each model's gradient bytes on P hosts, 2 (P-1) alpha +
2 (P-1)/P n beta per bucket, with (a) the measured shared-memory alpha, beta and (b) a
network's (--net-alpha-us, --net-gbps); kiln's staging (kiln minus MPI at 2 ranks, from the two
fits) is added as a per-rank constant. Efficiency under weak scaling (fixed per-rank batch):
compute / (compute + comm), with compute the measured 2 x 1 step minus its all-reduce.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


def run(command, threads):
    env = dict(os.environ, **MPI_ENV, KILN_NUM_THREADS=str(threads))
    print("+ KILN_NUM_THREADS=%d %s" % (threads, " ".join(command)), file=sys.stderr, flush=True)
    out = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def fit(rows, key):
    """alpha, beta of t = 2 alpha + n beta (a 2-rank ring all-reduce) from the rows' `key`: beta
    the least-squares slope over the messages of 1 MiB and more (where bandwidth dominates),
    alpha half the smallest message's time (4 KiB is latency-bound; subtracting its bytes at the
    large messages' beta, which is out of cache, would leave nothing)."""
    big = [r for r in rows if r["bytes"] >= 1 << 20]
    mean_n = sum(r["bytes"] for r in big) / len(big)
    mean_t = sum(r[key] for r in big) / len(big)
    beta = (sum((r["bytes"] - mean_n) * (r[key] - mean_t) for r in big) /
            sum((r["bytes"] - mean_n) ** 2 for r in big))
    small = rows[0]
    alpha = small[key] / 2
    return alpha, beta


def ring(p, n, buckets, alpha, beta):
    return buckets * 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--min-time", default="1", help="seconds per timed loop (dist_bench)")
    parser.add_argument("--max-bytes", default=str(64 << 20))
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--net-alpha-us", type=float, default=20.0,
                        help="the network's per-message latency for the model (25 GbE: ~10-30)")
    parser.add_argument("--net-gbps", type=float, default=3.0,
                        help="the network's bandwidth in GB/s for the model (25 GbE: ~3)")
    parser.add_argument("--hosts", default="8,64")
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--from-json", help="print the tables of an earlier --json; run nothing")
    args = parser.parse_args()
    bench = str(pathlib.Path(args.build) / "benchmarks" / "dist_bench")
    common = ["--min-time", args.min_time, "--max-bytes", args.max_bytes]

    if args.from_json:
        saved = json.loads(pathlib.Path(args.from_json).read_text())
        one, two = saved["1x2"], saved["2x1"]
    else:
        one = run([bench, "--part", "train"] + common, threads=2)
        two = run([args.mpirun, "-np", "2", "-x", "KILN_NUM_THREADS", bench, "--part", "all"] +
                  common, threads=1)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"1x2": one, "2x1": two}, indent=1))
    for row in one["train"] + two["train"]:
        if row["error"]:
            sys.exit("dist_peers: %s %s: %s" % (row["model"], row["mode"], row["error"]))

    print("all_reduce, f32 sum, 2 ranks (2 x 1), time per call (best of 3 loops), GB/s")
    print("| bytes | kiln us | kiln algbw | kiln busbw | MPI us | MPI algbw | MPI busbw "
          "| kiln / MPI | page faults per call, kiln / MPI |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in two["all_reduce"]:
        print("| %d | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f | %.0f / %.0f |" % (
            r["bytes"], r["kiln_s"] * 1e6, r["kiln_algbw_GBps"], r["kiln_busbw_GBps"],
            r["mpi_s"] * 1e6, r["mpi_algbw_GBps"], r["mpi_busbw_GBps"], r["kiln_s"] / r["mpi_s"],
            r["kiln_faults_per_call"], r["mpi_faults_per_call"]))

    print("\ntraining steps, ms (median step; phases of rank 0)")
    print("| model | config | batch per rank | step | fwd+bwd | all-reduce | update "
          "| all-reduce share |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    by = {}
    for config, result in (("1x2", one), ("2x1", two)):
        for r in result["train"]:
            by[(r["model"], config, r["mode"])] = r
            phases = ("| %.2f | %.2f | %.2f | %.0f%% |" % (
                r["compute_s"] * 1e3, r["all_reduce_s"] * 1e3, r["update_s"] * 1e3,
                100 * r["all_reduce_s"] / r["step_s"])) if r["mode"] == "ddp" else "| | | | |"
            print("| %s | %s %s | %d | %.2f %s" % (r["model"], config, r["mode"], r["rank_batch"],
                                                  r["step_s"] * 1e3, phases))

    print("\nscaling efficiency t(1x2 single) / t(2x1 ddp) (ideal on 2 cores: 1.0)")
    for model in sorted({k[0] for k in by}):
        t1, t2 = by[(model, "1x2", "single")]["step_s"], by[(model, "2x1", "ddp")]["step_s"]
        print("  %s: %.2f / %.2f ms = %.2f" % (model, t1 * 1e3, t2 * 1e3, t1 / t2))

    rows = two["all_reduce"]
    mpi_alpha, mpi_beta = fit(rows, "mpi_s")
    kiln_alpha, kiln_beta = fit(rows, "kiln_s")
    net_alpha, net_beta = args.net_alpha_us * 1e-6, 1 / (args.net_gbps * 1e9)
    print("\nfit (2 ranks, t = 2 alpha + n beta): MPI alpha %.2f us, 1/beta %.2f GB/s; "
          "kiln alpha %.2f us, 1/beta %.2f GB/s; network assumed: alpha %.1f us, %.2f GB/s" % (
              mpi_alpha * 1e6, 1e-9 / mpi_beta, kiln_alpha * 1e6, 1e-9 / kiln_beta,
              net_alpha * 1e6, args.net_gbps))
    hosts = [int(h) for h in args.hosts.split(",")]
    print("| model | grad bytes | compute ms | links | " +
          " | ".join("P=%d comm ms | P=%d eff" % (p, p) for p in hosts) + " |")
    print("| --- | ---: | ---: | --- |" + " ---: | ---: |" * len(hosts))
    for model in sorted({k[0] for k in by}):
        r = by[(model, "2x1", "ddp")]
        n, buckets = r["grad_bytes"], r["buckets"]
        compute = r["step_s"] - r["all_reduce_s"]
        staging = 2 * (kiln_alpha - mpi_alpha) + n * (kiln_beta - mpi_beta)
        for links, (alpha, beta) in (("shared memory (measured)", (mpi_alpha, mpi_beta)),
                                     ("network (assumed)", (net_alpha, net_beta))):
            cells = []
            for p in hosts:
                comm = ring(p, n, buckets, alpha, beta) + max(staging, 0.0)
                cells.append("%.2f | %.2f" % (comm * 1e3, compute / (compute + comm)))
            print("| %s | %d | %.2f | %s | %s |" % (model, n, compute * 1e3, links,
                                                    " | ".join(cells)))


if __name__ == "__main__":
    main()
