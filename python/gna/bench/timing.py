"""Device timing: medians of event-timed repetitions (triton's do_bench when present)."""
import torch


def bench_ms(fn, warmup_ms=25, rep_ms=200):
    """Median milliseconds of fn() on the current CUDA stream."""
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end), 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    times = []
    for _ in range(max(5, int(rep_ms / estimate))):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth_gbps(megabytes=1024):
    """Device-to-device copy bandwidth, bytes read plus bytes written per second (GB/s)."""
    src = torch.empty(megabytes << 20, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (megabytes << 20) / ms / 1e6
