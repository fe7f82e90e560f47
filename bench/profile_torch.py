"""profile_torch.py - where PyTorch's CNN step spends the GPU's time, kernel by
kernel: the GPU pack's profile stage, beside ncu's view of mirror's step.

The trainer's CNN (bench_torch.py's model) at batch 512 in fp32 with TF32 off,
eager, Adam, on the digits of DIR/bench_digits.bin (written by bench_gpu):
3 steps to warm up, then torch.profiler over STEPS steps (default 10). Prints
the kernels by their total time on the device and each step's mean. The CUDA
graph replay that bench_torch.py also times runs the same kernels without
their launches.

Arguments: [cpu] [--dir DIR] [--steps STEPS]; cpu profiles the CPU's
operations instead, to try the script without a GPU.
"""
import os
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from bench_torch import load, model, set_tf32


def main():
    args = sys.argv[1:]
    dev = "cpu" if "cpu" in args else "cuda"
    where = os.environ.get("BENCH_DIR") or "build"
    if "--dir" in args:
        where = args[args.index("--dir") + 1]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 10
    if dev == "cuda" and not torch.cuda.is_available():
        print("profile_torch: no CUDA device", file=sys.stderr)
        return 1
    batch = 512
    x, y = load(os.path.join(where, "bench_digits.bin"))
    if x.shape[0] < batch:
        print(f"profile_torch: {x.shape[0]} samples in bench_digits.bin, under a batch of {batch}", file=sys.stderr)
        return 1
    x, y = x[:batch].to(dev), y[:batch].to(dev)
    set_tf32(dev, False)
    net = model("cnn", None).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    if dev == "cuda":
        torch.cuda.synchronize()
    activity = ProfilerActivity.CUDA if dev == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(steps):
            step()
        if dev == "cuda":
            torch.cuda.synchronize()
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "the CPU"
    print(f"# torch {torch.__version__} on {name}: the CNN at batch {batch}, fp32 (TF32 off), eager, {steps} steps")
    events = prof.key_averages()
    # the device's time: device_time in newer releases, cuda_time before
    own = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    key = ("device_time_total" if own.startswith("self_device") else "cuda_time_total") if dev == "cuda" else \
        "cpu_time_total"
    print(events.table(sort_by=key, row_limit=30))
    if dev == "cuda":
        total = sum(getattr(e, own) for e in events)  # microseconds, every kernel once
        print(f"device time a step: {total / steps / 1e3:.3f} ms (the kernels' own times, added)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
