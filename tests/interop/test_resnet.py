#!/usr/bin/env python3
"""test_resnet.py BUILD_DIR - a ResNet's 20 training steps in mirror against PyTorch's.

BUILD_DIR/interop_resnet (tests/interop/resnet.c) trains conv 8, batchnorm,
relu, an identity block and a projecting one, global pooling and dense 10
with SGD (Nesterov momentum 0.9, weight decay 1e-4, rate 0.05) on batches of
50 (the last two 49 and 2), in deterministic mode on 1 and 3 replicas and
without it on 1, 2 and 3, and writes each step's parameters, loss and relu
inputs. torch trains the same network from the same start in float64, and
each run must follow it within float32's rounding (the loss within 1e-6,
the parameters within 1e-5 of 1 + |value|) until the first step where one
of its relus' inputs has the other sign than float64's. That input must lie
within 1e-5 of 0 in both: a tie within rounding, which passes the relu's
gradient in one and not in the other, and from which the runs part by more
than rounding (1e-4 and more within a few steps: which run meets one
depends on the order of its sums, so on the mode, the replica count and
the compiler). Prints where each run parts. Skipped, with the reason,
where torch is not installed.
Ends with "resnet: N passed, N failed"; exit 1 when any failed.
Run by make test-interop (needs numpy; torch for the comparison).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"resnet: skipped: torch is not installed ({e})")
    sys.exit(0)

SIDE, STEPS = 12, 20
RELU_PER_SAMPLE = 8 * 144 + 8 * 144 + 16 * 36  # the three batchnorm layers' outputs
RUNS = [(1, 16), (3, 16), (1, 0), (2, 0), (3, 0)]  # (replicas, deterministic mode's chunk or 0)
LOSS_TOL, PARAM_TOL, TIE = 1e-6, 1e-5, 1e-5
passed = failed = 0


def check(ok, what):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print(f"{'ok' if ok else 'FAILED'}: {what}")
    return ok


def batches():
    first = 0
    for k in range(STEPS):
        n = 50 if k < 18 else 49 if k == 18 else 2
        yield first, n
        first += n


class Net(torch.nn.Module):
    """The network of resnet.c; parameters() in mirror's order."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.c1, self.b1 = nn.Conv2d(1, 8, 3, 1, 1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, 1, 1), nn.BatchNorm2d(8)
        self.c3, self.b3 = nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16)
        self.proj = nn.Conv2d(8, 16, 1, 2, 0)
        self.fc = nn.Linear(16, 10)
        self.z = []

    def forward(self, x):
        z1 = self.b1(self.c1(x))
        x = F.relu(z1)
        z2 = self.b2(self.c2(x))
        x = F.relu(z2) + x
        z3 = self.b3(self.c3(x))
        x = F.relu(z3) + self.proj(x)
        self.z = [z.detach().reshape(-1) for z in (z1, z2, z3)]
        return self.fc(x.mean((2, 3)))


def float64_run(d):
    """torch's float64 training from resnet.c's start: each step's parameters, loss and relu inputs."""
    torch.manual_seed(0)
    x = torch.from_numpy(np.fromfile(os.path.join(d, "x.f32"), "<f4").reshape(-1, 1, SIDE, SIDE)).double()
    y = torch.from_numpy(np.fromfile(os.path.join(d, "labels.i32"), "<i4").astype(np.int64))
    init = np.fromfile(os.path.join(d, "init.f32"), "<f4")
    net = Net().double()
    at = 0
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.from_numpy(init[at:at + p.numel()].reshape(p.shape)))
            at += p.numel()
    check(at == init.size, f"torch's network holds mirror's {init.size} parameters ({at})")
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    params, losses, relus = [], [], []
    for first, n in batches():
        opt.zero_grad()
        loss = F.cross_entropy(net(x[first:first + n]), y[first:first + n])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        relus.append(torch.cat(net.z).numpy())
        params.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy())
    return params, losses, relus


def mirror_run(build, d, replicas, chunk):
    rc = subprocess.run([os.path.join(build, "interop_resnet"), str(replicas), str(chunk), d],
                        capture_output=True, text=True)
    if not check(rc.returncode == 0, f"interop_resnet {replicas} {chunk}: exit {rc.returncode} {rc.stderr.strip()}"):
        return None
    params = np.fromfile(os.path.join(d, "params.f32"), "<f4").astype(np.float64).reshape(STEPS, -1)
    losses = np.fromfile(os.path.join(d, "loss.f64"), "<f8")
    relu = np.fromfile(os.path.join(d, "relu.f32"), "<f4").astype(np.float64)
    ends = np.cumsum([n * RELU_PER_SAMPLE for _, n in batches()])
    if not check(relu.size == ends[-1], f"interop_resnet {replicas} {chunk}: {ends[-1]} relu inputs ({relu.size})"):
        return None
    return params, losses, np.split(relu, ends[:-1])


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with tempfile.TemporaryDirectory() as d:
        runs = {rc: mirror_run(build, d, *rc) for rc in RUNS}
        ref = float64_run(d) if runs[RUNS[0]] else None
    for (replicas, chunk), run in runs.items():
        if run is None or ref is None:
            continue
        name = f"{replicas} replica{'s' if replicas > 1 else ''}" + (", deterministic" if chunk else "")
        worst_loss = worst_param = 0.0
        split = None
        for k in range(STEPS):
            z, zt = run[2][k], ref[2][k]
            worst_loss = max(worst_loss, abs(run[1][k] - ref[1][k]))
            other = np.nonzero((z > 0) != (zt > 0))[0]
            if other.size:  # this step's gradients part: the parameters after it are compared no more
                i = other[np.argmax(np.maximum(np.abs(z[other]), np.abs(zt[other])))]
                split = (k + 1, other.size, int(i), z[i], zt[i])
                break
            worst_param = max(worst_param, float(np.max(np.abs(run[0][k] - ref[0][k]) / (1 + np.abs(ref[0][k])))))
        steps = split[0] - 1 if split else STEPS
        check(worst_loss <= LOSS_TOL and worst_param <= PARAM_TOL,
              f"{name}: float64's loss within {worst_loss:.2g} and parameters within {worst_param:.2g} "
              f"over {steps} steps")
        if split:
            k, count, i, z, zt = split
            check(max(abs(z), abs(zt)) <= TIE,
                  f"{name}: parts from float64 at step {k}, where {count} relu input(s) take the other side, "
                  f"the farthest from 0 element {i} of the steps' relu inputs: {z:.3g} (float64 {zt:.3g})")
        final = float(np.max(np.abs(run[0][-1] - ref[0][-1]) / (1 + np.abs(ref[0][-1]))))
        print(f"   {name}: after {STEPS} steps {final:.2g} from float64's parameters")
    print(f"resnet: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
