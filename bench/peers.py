"""peers.py - mirror against PyTorch and TensorFlow on the CPU, side by side.

    make bench-peers     (installs torch, tensorflow-cpu and numpy with pip
                          when they are missing; make test never needs them)

Workloads: the MLP 784-256-128-10 and the CNN of examples/models.h at global
batches 64 and 256, Adam, fp32, random 28x28 inputs. Modes: mirror with 1
and 2 CPU replicas, from each of its builds (the first in bf16 mixed
precision too; MIRROR_BUILDS: "label=path;..."
of build/bench_peers programs; make bench-peers gives the default build,
the same at -O2, and clang's where clang is installed), PyTorch eager with 2
threads, PyTorch DDP over gloo with 2 processes of 1 thread, Keras on one
device (TensorFlow's default: its oneDNN operations on), and
tf.distribute.MirroredStrategy over 2 logical CPU devices. Each mode is one
long-lived worker that times one pass when asked: the 2560 samples once for
the CNN, 8 times over for the MLP (once would last 20 ms, where one
interruption of the machine moves the rate by half); the driver
asks every mode in turn, round after round, so that noise falls on all
alike, and prints the median samples/s of each. It first prints the
machine: the CPU, its vector extensions, the compilers, and the machine's
own two-thread scaling (vector multiply-adds on 2 threads over 1), the
bound on what 2 replicas can gain over 1.
"""
import os
import statistics
import subprocess
import sys
import time

SAMPLES, ROUNDS = 2560, 7
EPOCHS = {"mlp": 8, "cnn": 1}  # a timed pass: this many times over the samples
WORKLOADS = (("mlp", 64), ("mlp", 256), ("cnn", 64), ("cnn", 256))
PEERS = ("torch_eager", "torch_ddp", "keras", "tf_mirrored")


def data(np, channels_last):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((SAMPLES, 28, 28, 1) if channels_last else (SAMPLES, 1, 28, 28), dtype=np.float32)
    return x, rng.integers(0, 10, SAMPLES).astype(np.int64)


def serve(run):
    """Answers each request line "MODEL BATCH EPOCHS" with run(model, batch, epochs) in samples/s."""
    for line in sys.stdin:
        kind, batch, epochs = line.split()[:3]
        print(f"{run(kind, int(batch), int(epochs)):.1f}", flush=True)


# PyTorch ----------------------------------------------------------------
def torch_pass(torch, net, opt, x, y, batch, epochs, rank=0, world=1):
    """epochs passes over the samples; with world > 1 each rank takes its shard of every global batch."""
    loss_fn = torch.nn.CrossEntropyLoss()
    shard = batch // world
    t0 = time.perf_counter()
    for _ in range(epochs):
        for i in range(0, SAMPLES - batch + 1, batch):
            lo = i + rank * shard
            opt.zero_grad(set_to_none=True)
            loss_fn(net(x[lo:lo + shard]), y[lo:lo + shard]).backward()
            opt.step()
    return epochs * SAMPLES / (time.perf_counter() - t0)


def torch_eager():
    import numpy as np
    import torch
    import bench_torch  # the same PyTorch models as the GPU benchmark
    torch.set_num_threads(2)
    x, y = (torch.from_numpy(a) for a in data(np, False))
    models = {}

    def run(kind, batch, epochs):
        if (kind, batch) not in models:
            net = bench_torch.model(kind, None)
            models[kind, batch] = (net, torch.optim.Adam(net.parameters(), lr=1e-3))
            torch_pass(torch, *models[kind, batch], x, y, batch, epochs)
        return torch_pass(torch, *models[kind, batch], x, y, batch, epochs)
    serve(run)


def ddp_rank(rank, world, port, requests):
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    import bench_torch
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = (torch.from_numpy(a) for a in data(np, False))
    models = {}
    stdin = open(0) if rank == 0 else None
    while True:
        # Rank 0 reads the request and hands it on through a queue: the other
        # ranks wait in a blocking read, where gloo's collectives poll and
        # take a share of a core from the mode being timed.
        if rank == 0:
            line = stdin.readline().split()
            for _ in range(world - 1):
                requests.put(line)
        else:
            line = requests.get()
        if not line:
            break
        kind, batch, epochs = line[0], int(line[1]), int(line[2])
        if (kind, batch) not in models:
            torch.manual_seed(1)
            net = DistributedDataParallel(bench_torch.model(kind, None))
            models[kind, batch] = (net, torch.optim.Adam(net.parameters(), lr=1e-3))
            torch_pass(torch, *models[kind, batch], x, y, batch, epochs, rank, world)
        dist.barrier()
        rate = torch_pass(torch, *models[kind, batch], x, y, batch, epochs, rank, world)
        dist.barrier()
        if rank == 0:
            print(f"{rate:.1f}", flush=True)
    dist.destroy_process_group()


def torch_ddp():
    import torch.multiprocessing as mp
    mp.spawn(ddp_rank, args=(2, 29500 + os.getpid() % 1000, mp.get_context("spawn").SimpleQueue()), nprocs=2)


# TensorFlow -------------------------------------------------------------
def keras_worker(mirrored):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    if mirrored:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:
        strategy = tf.distribute.get_strategy()
    x, y = data(np, True)
    models = {}

    class Clock(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if not hasattr(self, "t0"):  # the first batch of the first epoch
                self.t0 = time.perf_counter()

        def on_train_end(self, logs=None):
            self.seconds = time.perf_counter() - self.t0

    def build(kind):
        L = tf.keras.layers
        if kind == "mlp":
            layers = [L.Flatten(), L.Dense(256, "relu"), L.Dense(128, "relu"), L.Dense(10)]
        else:
            layers = [L.Conv2D(16, 3, padding="same", activation="relu"), L.MaxPooling2D(),
                      L.Conv2D(32, 3, padding="same", activation="relu"), L.MaxPooling2D(), L.Flatten(),
                      L.Dense(128, "relu"), L.Dense(10)]
        with strategy.scope():
            net = tf.keras.Sequential([tf.keras.Input((28, 28, 1))] + layers)
            net.compile(tf.keras.optimizers.Adam(1e-3),
                        tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return net

    def run(kind, batch, epochs):
        clock = Clock()
        if (kind, batch) not in models:
            models[kind, batch] = build(kind)
            models[kind, batch].fit(x, y, batch_size=batch, epochs=epochs, verbose=0, shuffle=False)
        models[kind, batch].fit(x, y, batch_size=batch, epochs=epochs, verbose=0, shuffle=False, callbacks=[clock])
        return epochs * SAMPLES / clock.seconds
    serve(run)


# The driver -------------------------------------------------------------
def cpu():
    """The CPU's model name and the vector extensions that matter here."""
    name, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_bf16", "asimd")
    return name, " ".join(f for f in wanted if f in flags) or "none of " + ", ".join(wanted)


def ask(proc, line):
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def main():
    build = os.environ.get("BUILD", "build")
    builds = [b.split("=", 1) for b in os.environ.get("MIRROR_BUILDS", f"default={build}/bench_peers").split(";") if b]
    builds = [(label, path) for label, path in builds if os.path.exists(path)]
    workers = {}
    for label, path in builds:
        workers[label] = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first = builds[0][0]
    name, flags = cpu()
    print(f"machine: {name}, {os.cpu_count()} CPUs; {flags}")
    compilers = [ask(workers[label], "compiler") for label, _ in builds]  # each answers once it has started
    print(f"two-thread scaling of vector multiply-adds: {float(ask(workers[first], 'scaling')):.2f}x")
    for (label, _), compiler in zip(builds, compilers):
        print(f"mirror {label}: {compiler}")
    for mode in PEERS:
        workers[mode] = subprocess.Popen([sys.executable, __file__, "--worker", mode], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
    # every build on 1 and 2 replicas in fp32, and the first in bf16 (mixed precision) too
    mirrors = [(label, n, "fp32") for label, _ in builds for n in (1, 2)] + [(first, n, "bf16") for n in (1, 2)]
    modes = [f"mirror {label} {n}" + ("" if p == "fp32" else f" {p}") for label, n, p in mirrors] + list(PEERS)
    rates = {(w, m): [] for w in WORKLOADS for m in modes}
    for r in range(ROUNDS):
        for kind, batch in WORKLOADS:
            for (label, n, p), mode in zip(mirrors, modes):
                rates[(kind, batch), mode].append(
                    float(ask(workers[label], f"{kind} {batch} {n} auto {p} {EPOCHS[kind]}")))
            for mode in PEERS:
                rates[(kind, batch), mode].append(float(ask(workers[mode], f"{kind} {batch} {EPOCHS[kind]}")))
        print(f"round {r + 1}/{ROUNDS} done", file=sys.stderr)
    scaling = float(ask(workers[first], "scaling"))  # again, after the work: the machine may have changed
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    import torch
    import tensorflow as tf
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "the default, on")
    print(f"two-thread scaling after the runs: {scaling:.2f}x")
    passes = ", ".join(f"{kind.upper()} {EPOCHS[kind] * SAMPLES}" for kind in EPOCHS)
    print(f"\nsamples/s, median of {ROUNDS} interleaved passes (samples a pass: {passes}); Adam, fp32; "
          f"torch {torch.__version__}, tensorflow {tf.__version__} (oneDNN: {onednn}); mirror {first}")
    print("| model, global batch | mirror 1 rep | mirror 2 rep | torch eager | torch DDP | Keras | TF Mirrored "
          "| mirror 2 / fastest peer | mirror 2 / 1 / two-thread scaling |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    med = {(w, m): statistics.median(rates[w, m]) for w in WORKLOADS for m in modes}
    for w in WORKLOADS:
        one, two = med[w, f"mirror {first} 1"], med[w, f"mirror {first} 2"]
        best = max(med[w, m] for m in PEERS)
        print(f"| {w[0].upper()}, {w[1]} | {one:.0f} | {two:.0f} | " + " | ".join(f"{med[w, m]:.0f}" for m in PEERS) +
              f" | {two / best:.2f}x | {two / one / scaling:.2f} |")
    print(f"\nmirror {first} in bf16 (mixed precision: 16-bit weights, activations and gradients, fp32 master "
          "weights), samples/s, and over its fp32")
    print("| model, global batch | 1 rep fp32 | 1 rep bf16 | bf16 / fp32 | 2 rep fp32 | 2 rep bf16 | bf16 / fp32 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for w in WORKLOADS:
        cells = []
        for n in (1, 2):
            a, b = med[w, f"mirror {first} {n}"], med[w, f"mirror {first} {n} bf16"]
            cells += [f"{a:.0f}", f"{b:.0f}", f"{b / a:.2f}x"]
        print(f"| {w[0].upper()}, {w[1]} | " + " | ".join(cells) + " |")
    if len(builds) > 1:
        ref = builds[-1][0]
        print(f"\nmirror's builds, samples/s (1 replica, 2 replicas) and 1-replica ratios to {ref}")
        print("| model, global batch | " + " | ".join(label for label, _ in builds) +
              " | " + " | ".join(f"{label} / {ref}" for label, _ in builds[:-1]) +
              " | " + " | ".join(f"{label}: 2 rep / fastest peer" for label, _ in builds) + " |")
        print("| --- " * (3 * len(builds)) + "|")
        for w in WORKLOADS:
            best = max(med[w, m] for m in PEERS)
            cells = [f"{med[w, f'mirror {label} 1']:.0f}, {med[w, f'mirror {label} 2']:.0f}" for label, _ in builds]
            cells += [f"{med[w, f'mirror {label} 1'] / med[w, f'mirror {ref} 1']:.2f}x" for label, _ in builds[:-1]]
            cells += [f"{med[w, f'mirror {label} 2'] / best:.2f}x" for label, _ in builds]
            print(f"| {w[0].upper()}, {w[1]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        {"torch_eager": torch_eager, "torch_ddp": torch_ddp, "keras": lambda: keras_worker(False),
         "tf_mirrored": lambda: keras_worker(True)}[sys.argv[2]]()
    else:
        main()
