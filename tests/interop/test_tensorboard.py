#!/usr/bin/env python3
"""test_tensorboard.py BUILD_DIR - TensorBoard's own reader reads mirror's events.

Trains with BUILD_DIR/train --history and --tensorboard (fp16, so that the
loss scale moves, and --clip-norm, so that the gradient's norm is
computed; points every 3 steps within the epochs), then reads the
directory with the tensorboard package's EventAccumulator, the loader
TensorBoard itself uses: every number of every history row is there, at
its step, as a float. A run in fp32 without clipping has no grad_norm,
loss_scale or skipped_steps at all (the history's 0s there mean "does
not apply"). Then a run resumed from its first epoch's
checkpoint after the run had gone on (the machine lost, the run resumed
from an older checkpoint, at another learning rate so that its numbers
differ): TensorBoard shows that run's points once each, the lost run's
dropped, like the history.
Ends with "tensorboard: N passed, N failed"; exit 1 when any failed.
Run by make test-interop (needs the tensorboard package).
"""
import csv
import logging
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# The history's columns and the tags that carry them.
TAGS = {"epoch": "epoch", "train_loss": "loss/train", "train_acc": "accuracy/train", "val_loss": "loss/validation",
        "val_acc": "accuracy/validation", "lr": "learning_rate", "grad_norm": "grad_norm",
        "loss_scale": "loss_scale", "skipped": "skipped_steps", "samples_per_s": "samples_per_s"}
STEPS = 8  # 512 samples in batches of 64
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    passed, failed = passed + bool(ok), failed + (not ok)


def train(build, *args, precision="fp16"):
    cmd = [os.path.join(build, "train"), "--model", "mlp", "--synthetic", "512", "--batch", "64", "--precision",
           precision, "--progress", "none", "--curve-every", "3", *args]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("train failed: %s\n%s%s" % (" ".join(cmd), run.stdout, run.stderr))


def scalars(logdir):
    """{tag: {step: value}} as TensorBoard shows them; duplicate steps are errors."""
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    out, doubled = {}, []
    for tag in acc.Tags()["scalars"]:
        points = acc.Scalars(tag)
        out[tag] = {p.step: p.value for p in points}
        if len(out[tag]) != len(points):
            doubled.append(tag)
    return out, doubled


def compare(history, logdir, what, absent=()):
    """Every number of every history row at its step; no other point; no
    tag of the columns `absent` (those that do not apply) at all."""
    rows = list(csv.DictReader(open(history)))
    shown, doubled = scalars(logdir)
    check(not doubled, "%s: one point a step (doubled: %s)" % (what, ", ".join(doubled) or "none"))
    if absent:
        there = sorted(TAGS[c] for c in absent if TAGS[c] in shown)
        check(not there, "%s: no %s (there: %s)" % (what, ", ".join(TAGS[c] for c in absent),
                                                       ", ".join(there) or "none"))
    steps, wrong = [], []
    for row in rows:
        x = float(row["epoch"])
        step = (int(np.ceil(x)) - 1) * STEPS + int(row["steps"])
        steps.append(step)
        for column, tag in TAGS.items():
            if column in absent:
                continue
            if row[column] == "":
                ok = step not in shown.get(tag, {})  # no validation within an epoch
            else:
                want = np.float32(float(row[column]))
                got = shown.get(tag, {}).get(step)
                # the history rounds the speed to 0.1, TensorBoard holds a float
                tolerance = 0.05 + 1e-7 * abs(want) if column == "samples_per_s" else 0
                ok = got is not None and abs(np.float32(got) - want) <= tolerance
            if not ok:
                wrong.append("%s at step %d (%s in the history, %s shown)" % (tag, step, row[column],
                                                                            shown.get(tag, {}).get(step)))
    check(rows and not wrong, "%s: %d rows, each number at its step%s" % (what, len(rows),
                                                                           ": " + "; ".join(wrong[:4]) if wrong else ""))
    extra = sorted(set(shown.get("loss/train", {})) - set(steps))
    check(not extra, "%s: no point the history lacks (%s)" % (what, extra or "none"))
    scales = set(shown.get("loss_scale", {}).values())
    return scales


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # the purge it reports is the point
    tmp = tempfile.mkdtemp(prefix="mirror_tb_")
    try:
        tb, history, ckpt = (os.path.join(tmp, n) for n in ("tb", "history.csv", "run.ckpt"))
        train(build, "--epochs", "3", "--history", history, "--tensorboard", tb, "--save", ckpt,
              "--checkpoint-every", str(STEPS), "--clip-norm", "5")
        scales = compare(history, tb, "3 epochs in fp16, clipped")
        check(len(scales) >= 1 and all(s > 1 for s in scales), "the loss scale is fp16's (%s)" % sorted(scales))
        norms = set(scalars(tb)[0].get("grad_norm", {}).values())
        check(norms and all(n > 0 for n in norms), "the gradient's norm, computed for the clipping, is there (%d "
              "values)" % len(norms))

        tb32, history32 = os.path.join(tmp, "tb32"), os.path.join(tmp, "history32.csv")
        train(build, "--epochs", "2", "--history", history32, "--tensorboard", tb32, precision="fp32")
        compare(history32, tb32, "2 epochs in fp32, not clipped", absent=("grad_norm", "loss_scale", "skipped"))

        # ckpt.2 is the first epoch's checkpoint: resumed from it, the run's
        # epochs 2 and 3 again at another rate, over the first run's events.
        shutil.copy(ckpt + ".2", os.path.join(tmp, "epoch1.ckpt"))
        train(build, "--epochs", "3", "--history", history, "--tensorboard", tb, "--lr", "0.003",
              "--resume", os.path.join(tmp, "epoch1.ckpt"), "--clip-norm", "5")
        check(len([f for f in os.listdir(tb) if "tfevents" in f]) == 2, "the resumed run: a second event file")
        compare(history, tb, "resumed from epoch 1 at lr 0.003")
    finally:
        shutil.rmtree(tmp)
    print("tensorboard: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
