"""mpi.py - mirror over MPI against mirror in one process and PyTorch DDP.

    make bench-mpi     (needs mpicc and mpirun; installs torch and numpy with
                        pip when they are missing)

The MLP and the CNN of examples/models.h at global batches 64 and 256, Adam,
fp32, as in bench/peers.py. Modes: mirror with 2 processes of 1 replica
(build/bench_peers_mpi under mpirun), each process updating every parameter
or (sharded) its half alone; mirror with 1 process of 2 replicas
(build/bench_peers); and PyTorch DDP over gloo with 2 processes of 1 thread
(peers.py's worker). Each mode is one long-lived worker that times one pass
when asked, as long as peers.py's (both MPI modes are one worker); the driver asks
every mode in turn, round after round (the two MPI modes back to back, in
turn first), and prints the median samples/s of each, and the median of
the rounds' ratios of the two MPI modes.
"""
import os
import statistics
import subprocess
import sys

from peers import EPOCHS, SAMPLES

ROUNDS = 9
WORKLOADS = (("mlp", 64), ("mlp", 256), ("cnn", 64), ("cnn", 256))
MODES = ("mirror 2 processes x 1", "mirror 2 processes x 1, sharded", "mirror 1 process x 2",
         "torch DDP 2 processes")


def main():
    build = os.environ.get("BUILD", "build")
    mpirun = os.environ.get("MPIRUN") or "mpirun"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    here = os.path.dirname(os.path.abspath(__file__))
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    mpi = subprocess.Popen([mpirun, "--oversubscribe", "-np", "2", f"{build}/bench_peers_mpi"], env=env, **pipes)
    workers = {
        MODES[0]: (mpi, " 1 auto fp32"),
        MODES[1]: (mpi, " 1 on fp32"),
        MODES[2]: (subprocess.Popen([f"{build}/bench_peers"], **pipes), " 2 auto fp32"),
        MODES[3]: (subprocess.Popen([sys.executable, os.path.join(here, "peers.py"), "--worker", "torch_ddp"],
                                    **pipes), ""),
    }
    rates = {(w, m): [] for w in WORKLOADS for m in MODES}
    for r in range(ROUNDS):
        for kind, batch in WORKLOADS:
            # the two MPI modes side by side, in turn first and second
            for mode in (MODES[r % 2], MODES[1 - r % 2]) + MODES[2:]:
                proc, suffix = workers[mode]
                proc.stdin.write(f"{kind} {batch}{suffix} {EPOCHS[kind]}\n")
                proc.stdin.flush()
                rates[(kind, batch), mode].append(float(proc.stdout.readline()))
        print(f"round {r + 1}/{ROUNDS} done", file=sys.stderr)
    for proc in {proc for proc, _ in workers.values()}:
        proc.stdin.close()
        proc.wait()
    import torch
    passes = ", ".join(f"{kind.upper()} {EPOCHS[kind] * SAMPLES}" for kind in EPOCHS)
    print(f"samples/s, median of {ROUNDS} interleaved passes (samples a pass: {passes}); Adam, fp32; "
          f"torch {torch.__version__}")
    print("| model, global batch | " + " | ".join(MODES) +
          " | sharded / not | 2 processes / 1 process (not, sharded) | 2 processes sharded / DDP |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, batch in WORKLOADS:
        med = [statistics.median(rates[(kind, batch), m]) for m in MODES]
        # sharded / not: the median of each round's ratio (the two passes ran back to back)
        pair = statistics.median(a / b for a, b in zip(rates[(kind, batch), MODES[1]], rates[(kind, batch), MODES[0]]))
        print(f"| {kind.upper()}, {batch} | " + " | ".join(f"{v:.0f}" for v in med) +
              f" | {pair:.2f}x | {med[0] / med[2]:.2f}x, {med[1] / med[2]:.2f}x | {med[1] / med[3]:.2f}x |")


if __name__ == "__main__":
    main()
