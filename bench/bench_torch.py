"""bench_torch.py - PyTorch (eager, fp32) on the models and data of bench_gpu.c.

Reads build/bench_digits.bin (written by bench_gpu), trains the MLP at batch
128 and the CNN at batch 256 with Adam on one GPU, 50 steps per timing, median
of 7, and prints "torch <model> <batch> <samples/s>" lines.
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


def bench(kind, batch, x, y, dev):
    net = model(kind).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x, y = x.to(dev), y.to(dev)  # the data on the device, as in a tuned PyTorch loop
    per_epoch = x.shape[0] // batch
    times = []
    for r in range(ROUNDS + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(STEPS):
            i = (k % per_epoch) * batch
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x[i:i + batch]), y[i:i + batch])
            loss.backward()
            opt.step()
        loss.item()
        torch.cuda.synchronize()
        if r:
            times.append(time.perf_counter() - t0)
    return STEPS * batch / statistics.median(times)


def main():
    if not torch.cuda.is_available():
        print("bench_torch: no CUDA device", file=sys.stderr)
        return 1
    x, y = load()
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    for kind, batch in (("mlp", 128), ("cnn", 256)):
        print(f"torch {kind} {batch} {bench(kind, batch, x, y, 'cuda'):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
