"""bench_torch.py - PyTorch on the workloads of bench_gpu.c, side by side.

The same models (Adam) and shapes as bench_gpu.c: mlp (784-256-128-10, batch
128), mlp2048 (784-2048-2048-10, batch 4096), mlp8192 (8192-8192-8192-8192-10,
batch 8192) and cnn (the trainer's CNN, batch 512); the digits from
DIR/bench_digits.bin (written by bench_gpu; DIR from --dir, else $BENCH_DIR,
else build), random data for mlp8192. The
data sits on the device before timing (PyTorch's fastest loop; mirror keeps
its data on the device too where they fit, mirror_keep_data), and each line
ends with data=device (data=host on the CPU). On a GPU the mlp runs once
more with data=host: its data in pinned host memory, each step's batch
copied to the device (non_blocking; with graphs, into the static input
before the replay), as mirror's data=host rows upload theirs. Each workload
in three modes and four precisions:

  modes       eager; graphs (the whole step captured once in a CUDA graph and
              replayed: Adam(capturable=True), static input tensors);
              compile (torch.compile of the model, default mode; asked for
              by --modes: a score of Inductor compiles take minutes)
  precisions  fp32 (TF32 off in cuBLAS and cuDNN: mirror's fp32); tf32 (TF32
              on in both; on a GPU only, the CPU's tf32 being its fp32); amp
              (autocast to fp16 with a GradScaler, as mirror's fp16 mixed
              precision; not in a CUDA graph, where the scaler's host check
              cannot run); amp-bf16 (autocast to bf16, no scaler, as
              mirror's bf16: in a CUDA graph too, autocast's cast cache off
              there)

Then cuBLAS's own GEMM rate at 8192 x 8192 x 8192 in each precision (what
the GEMM-bound workload is measured against). Prints

  torch <workload> <batch> <precision> <mode> <samples/s> <ms/step> <TFLOP/s|-> data=<device|host>
  cublas <precision> <TFLOP/s>

Arguments: [cuda|cpu] [--quick] [--modes eager,graphs,compile] [--dir DIR].
--modes defaults to eager,graphs. --quick shrinks the workloads as bench_gpu
--quick does, to try the script on a CPU.
"""
import os
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

ROUNDS = 5
PRECISIONS = ("fp32", "tf32", "amp", "amp-bf16")
WORKLOADS = [  # name, batch, steps, (in, width, depth) for an MLP of random data, or None for the digits
    ("mlp", 128, 50, None),
    ("mlp2048", 4096, 20, (784, 2048, 2)),
    ("mlp8192", 8192, 5, (8192, 8192, 3)),
    ("cnn", 512, 20, None),
]


def load(path):
    raw = open(path, "rb").read()
    n = int(np.frombuffer(raw[:4], dtype=np.int32)[0])
    x = np.frombuffer(raw[4:4 + n * 784 * 4], dtype=np.float32).reshape(n, 1, 28, 28)
    y = np.frombuffer(raw[4 + n * 784 * 4:], dtype=np.int32)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64))


def model(name, shape):
    if shape:
        n_in, width, depth = shape
        layers, last = [nn.Flatten()], n_in
        for _ in range(depth):
            layers += [nn.Linear(last, width), nn.ReLU()]
            last = width
        return nn.Sequential(*layers, nn.Linear(last, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def set_tf32(dev, on):
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def timed(step, steps, dev):
    """Median seconds per step over ROUNDS runs of `steps`, after a warm-up run."""
    times = []
    for r in range(ROUNDS + 1):
        sync(dev)
        t0 = time.perf_counter()
        for k in range(steps):
            step(k)
        sync(dev)
        if r:
            times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


AUTOCAST = {"amp": torch.float16, "amp-bf16": torch.bfloat16}


def bench(name, batch, steps, shape, x, y, dev, precision, mode):
    """Seconds per step, or None where the mode does not apply. x and y on
    the host (pinned) with dev "cuda": each step copies its batch over."""
    if mode == "graphs" and (dev != "cuda" or precision == "amp"):
        return None
    set_tf32(dev, precision == "tf32")
    net = model(name, shape).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, capturable=mode == "graphs")
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(dev, enabled=precision == "amp")
    fwd = torch.compile(net) if mode == "compile" else net
    per = x.shape[0] // batch

    def step_on(xb, yb):
        # a graph's capture may not keep autocast's cast copies past it
        with torch.autocast(dev, dtype=AUTOCAST.get(precision, torch.float16), enabled=precision in AUTOCAST,
                            cache_enabled=mode != "graphs"):
            loss = loss_fn(fwd(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    def eager(k):
        i = (k % per) * batch
        opt.zero_grad(set_to_none=True)
        step_on(x[i:i + batch].to(dev, non_blocking=True), y[i:i + batch].to(dev, non_blocking=True))

    if mode != "graphs":
        return timed(eager, steps, dev)
    sx, sy = x[:batch].to(dev, copy=True), y[:batch].to(dev, copy=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph, as capture requires
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step_on(sx, sy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        step_on(sx, sy)

    def replay(k):
        i = (k % per) * batch
        sx.copy_(x[i:i + batch], non_blocking=True)
        sy.copy_(y[i:i + batch], non_blocking=True)
        graph.replay()

    return timed(replay, steps, dev)


def gemm_rate(dev, precision, n):
    """cuBLAS's (torch.mm's) TFLOP/s on an n x n x n product."""
    set_tf32(dev, precision == "tf32")
    dtype = AUTOCAST.get(precision, torch.float32)
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    return 2.0 * n ** 3 / timed(lambda k: torch.mm(a, b), 10, dev) / 1e12


def main():
    args = sys.argv[1:]
    dev = "cpu" if "cpu" in args else "cuda"
    quick = "--quick" in args
    modes = ["eager", "graphs"]
    if "--modes" in args:
        modes = args[args.index("--modes") + 1].split(",")
    where = os.environ.get("BENCH_DIR") or "build"
    if "--dir" in args:
        where = args[args.index("--dir") + 1]
    if dev == "cuda" and not torch.cuda.is_available():
        print("bench_torch: no CUDA device", file=sys.stderr)
        return 1
    digits_x, digits_y = load(os.path.join(where, "bench_digits.bin"))
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "the CPU"
    precisions = [p for p in PRECISIONS if dev == "cuda" or p != "tf32"]  # the CPU's tf32 is its fp32
    also = ", the mlp's from pinned host memory too (data=host)" if dev == "cuda" else ""
    print(f"# torch {torch.__version__} (CUDA {torch.version.cuda}) on {name}; data on the device{also}")
    for wname, batch, steps, shape in WORKLOADS:
        if quick:
            batch, steps = max(batch // 16, 1), 3
            if shape:
                shape = (512 if shape[0] == 8192 else shape[0], shape[1] // 16, shape[2])
        if shape and shape[0] != 784:
            gen = torch.Generator().manual_seed(7)
            x = torch.rand(batch, shape[0], generator=gen) * 2 - 1
            y = torch.arange(batch) % 10
        else:
            x, y = digits_x, digits_y
        params = sum(p.numel() for p in model(wname, shape).parameters())
        places = [(x.to(dev), y.to(dev))]  # each step slices x and y where they lie
        if wname == "mlp" and dev == "cuda":  # and from pinned host memory
            places.append((x.pin_memory(), y.pin_memory()))
        for px, py in places:
            lived = "host" if px.device.type == "cpu" else "device"
            for precision in precisions:
                for mode in modes:
                    t = bench(wname, batch, steps, shape, px, py, dev, precision, mode)
                    if t is None:
                        continue
                    tflops = f"{6.0 * batch * params / t / 1e12:.1f}" if shape else "-"
                    print(f"torch {wname} {batch} {precision} {mode} {batch / t:.0f} {1e3 * t:.3f} {tflops} "
                          f"data={lived}", flush=True)
    for precision in precisions:
        print(f"cublas {precision} {gemm_rate(dev, precision, 512 if quick else 8192):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
