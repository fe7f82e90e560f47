"""bench_torch.py - PyTorch (eager, fp32) on the models and data of bench_gpu.c.

Reads build/bench_digits.bin (written by bench_gpu), trains the MLP at batch
128 and the CNN at batch 256 with Adam on one GPU, 50 steps per timing, median
of 7, in two settings, and prints "torch <model> <batch> <samples/s> <setting>"
lines:

  strict  what mirror does: fp32 math throughout (cuDNN's and cuBLAS's TF32
          off; mirror's SGEMM is strict fp32), and each batch copied to the
          GPU in the step, from pinned host memory (mirror gathers each shard
          into pinned buffers and uploads it every step)
  tuned   PyTorch's defaults and a tuned loop: cuDNN convolutions in TF32
          (torch.backends.cudnn.allow_tf32, on by default), the whole dataset
          on the GPU before timing

An optional argument names the device (default cuda; "cpu" runs the same
loop on the CPU, to try the script where there is no GPU).
"""
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

STEPS, ROUNDS = 50, 7


def load(path="build/bench_digits.bin"):
    raw = open(path, "rb").read()
    n = int(np.frombuffer(raw[:4], dtype=np.int32)[0])
    x = np.frombuffer(raw[4:4 + n * 784 * 4], dtype=np.float32).reshape(n, 1, 28, 28)
    y = np.frombuffer(raw[4 + n * 784 * 4:], dtype=np.int32)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64))


def model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def bench(kind, batch, x, y, dev, setting):
    strict = setting == "strict"
    if dev == "cuda":
        torch.backends.cudnn.allow_tf32 = not strict
        torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default, in both settings
    net = model(kind).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    if strict:
        if dev == "cuda":
            x, y = x.pin_memory(), y.pin_memory()
    else:
        x, y = x.to(dev), y.to(dev)
    per_epoch = x.shape[0] // batch
    times = []
    for r in range(ROUNDS + 1):
        sync(dev)
        t0 = time.perf_counter()
        for k in range(STEPS):
            i = (k % per_epoch) * batch
            xb, yb = x[i:i + batch], y[i:i + batch]
            if strict:
                xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(xb), yb)
            loss.backward()
            opt.step()
        loss.item()
        sync(dev)
        if r:
            times.append(time.perf_counter() - t0)
    return STEPS * batch / statistics.median(times)


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def main():
    dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("bench_torch: no CUDA device", file=sys.stderr)
        return 1
    x, y = load()
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "the CPU"
    print(f"# torch {torch.__version__} on {name}; strict: fp32, data uploaded each step; "
          f"tuned: cuDNN TF32, data on the device")
    for kind, batch in (("mlp", 128), ("cnn", 256)):
        for setting in ("strict", "tuned"):
            print(f"torch {kind} {batch} {bench(kind, batch, x, y, dev, setting):.0f} {setting}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
