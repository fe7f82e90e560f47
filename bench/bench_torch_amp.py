"""bench_torch_amp.py - PyTorch's AMP update beside mirror's fused one (bench_fused_cuda).

The same flat arena of N parameters (default 256M, N from argv[1]), one
tensor. In PyTorch AMP the parameters and their gradients are fp32 (autocast
computes in 16 bits, the .grad stays fp32): grads are filled with values up
to 1e-3 times the loss scale 65536, as mirror's fp16 gradients are. Timed
with CUDA events, median of 7 after a warm-up:

  copy         dst.copy_(src) of 4N bytes, read + write: 8 B/param
  adamw_fused  torch.optim.AdamW(fused=True).step() alone: reads p g m v,
               writes p m v: 28 B/param
  amp_step     scaler.unscale_(opt) (_amp_foreach_non_finite_check_and_unscale_,
               in place: reads and writes g, 8 B) + scaler.step(opt) (the fused
               AdamW, 28 B) + scaler.update(): 36 B/param

The gradients are restored from a copy before each timing, outside it (the
unscale_ divides them in place). Prints "torch_amp <what> <B/param> <ms>
<GB/s> <of copy>" lines; exits 0 with a message, measuring nothing, without
torch or a CUDA device.
"""
import statistics
import sys

ROUNDS = 7
SCALE = 65536.0


def timed(fn, before=None):
    """Median milliseconds of fn() over ROUNDS timings after one warm-up."""
    import torch
    times = []
    for r in range(ROUNDS + 1):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if r:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    try:
        import torch
    except ImportError:
        print("bench_torch_amp: PyTorch not installed: nothing measured", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("bench_torch_amp: no CUDA device: nothing measured", file=sys.stderr)
        return 0
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(1)

    def uniform(lo, hi):
        return torch.rand(n, device=dev, generator=gen) * (hi - lo) + lo

    p = torch.nn.Parameter(uniform(-0.1, 0.1))
    g0 = uniform(-1e-3, 1e-3) * SCALE  # the scaled gradient, kept to restore
    p.grad = g0.clone()
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, fused=True)
    opt.step()  # creates exp_avg and exp_avg_sq
    with torch.no_grad():  # moments as in mirror's benchmark
        opt.state[p]["exp_avg"].copy_(uniform(-1e-3, 1e-3))
        opt.state[p]["exp_avg_sq"].copy_(uniform(0.0, 1e-6))
    scaler = torch.amp.GradScaler("cuda", init_scale=SCALE, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=2000)
    scaler.scale(torch.ones((), device=dev))  # creates the scaler's state, as scaling the loss does
    src, dst = uniform(-1.0, 1.0), torch.empty(n, device=dev)

    def restore():
        p.grad.copy_(g0)

    def amp_step():
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()

    ms = {
        "copy": timed(lambda: dst.copy_(src)),
        "adamw_fused": timed(opt.step, restore),
        "amp_step": timed(amp_step, restore),
    }
    bytes_per = {"copy": 8, "adamw_fused": 28, "amp_step": 36}
    print(f"# torch {torch.__version__} AMP update on {torch.cuda.get_device_name(0)}, N = {n} parameters "
          f"(fp32 params and grads), median of {ROUNDS}")
    copy_gbs = bytes_per["copy"] * n / (ms["copy"] * 1e-3) / 1e9
    for what, t in ms.items():
        gbs = bytes_per[what] * n / (t * 1e-3) / 1e9
        print(f"torch_amp {what:<30} {bytes_per[what]:7d} {t:10.3f} {gbs:9.1f} {gbs / copy_gbs:8.2f}")
    if scaler.get_scale() != SCALE:
        print(f"bench_torch_amp: the scale moved to {scaler.get_scale()}: a step was skipped", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
