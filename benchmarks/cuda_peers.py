#!/usr/bin/env python3
"""PyTorch beside kiln::Cuda on the same GPU, in the same run (scripts/gpu_check.sh).

Reads cuda_bench's JSON (argument 1), times the same work with the machine's PyTorch (CUDA events,
median of repetitions after warm-ups), and prints one Markdown table: kiln, PyTorch, the ratio and
the issue's target for each row. Exits 1 when torch has no CUDA device.
"""
import json
import statistics
import sys

import torch


def median_ms(body, repeats=20, warmup=3):
    for _ in range(warmup):
        body()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        body()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def copy_gbps():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() / (median_ms(lambda: y.copy_(x)) * 1e-3) / 1e9


def gelu_gbps():
    x = torch.rand(256 << 20, device="cuda")
    f = lambda: torch.nn.functional.gelu(x * 0.75 + 0.25, approximate="tanh")
    return 8 * x.numel() / (median_ms(f) * 1e-3) / 1e9


def matmul_tflops(n, dtype):
    torch.backends.cuda.matmul.allow_tf32 = True
    a = torch.rand(n, n, device="cuda", dtype=dtype)
    b = torch.rand(n, n, device="cuda", dtype=dtype)
    return 2 * n**3 / (median_ms(lambda: a @ b, repeats=10) * 1e-3) / 1e12


def step_ms(model, batch):
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(batch, 1, 28, 28, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return median_ms(step, repeats=50)


def mlp():
    nn = torch.nn
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                         nn.ReLU(), nn.Linear(256, 10))


def cnn():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def main():
    if not torch.cuda.is_available():
        print("cuda_peers: torch sees no CUDA device", file=sys.stderr)
        return 1
    kiln = json.load(open(sys.argv[1]))
    torch_copy = copy_gbps()
    rows = [
        # name, unit, kiln, torch, higher is better, target (as a ratio kiln/torch or of copy)
        ("device-to-device copy", "GB/s", kiln.get("copy_gbps"), torch_copy, True, None),
        ("gelu_tanh(x*a+b), 256M f32", "GB/s", kiln.get("gelu_gbps"), gelu_gbps(), True,
         ">= 80% of kiln's copy"),
        ("matmul bf16 8192^3", "TFLOP/s", kiln.get("matmul_bf16_tflops"),
         matmul_tflops(8192, torch.bfloat16), True, ">= 50% of torch.mm"),
        ("matmul f32 (tf32) 4096^3", "TFLOP/s", kiln.get("matmul_f32_tflops"),
         matmul_tflops(4096, torch.float32), True, ">= 50% of torch.mm"),
        ("MLP train step b128", "ms", kiln.get("mlp_step_ms"), step_ms(mlp(), 128), False,
         "<= PyTorch eager"),
        ("CNN train step b64", "ms", kiln.get("cnn_step_ms"), step_ms(cnn(), 64), False,
         "<= PyTorch eager"),
        ("cache-hit dispatch, 10 ops", "us", kiln.get("dispatch_us"), None, False, "<= 20 us"),
    ]
    print(f"device: {kiln.get('device')}; torch {torch.__version__} on "
          f"{torch.cuda.get_device_name()}\n")
    print("| work | unit | kiln | PyTorch | kiln / PyTorch | target |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, unit, k, t, _, target in rows:
        ratio = f"{k / t:.2f}" if k is not None and t else ""
        fmt = lambda v: "" if v is None else f"{v:.3g}"
        print(f"| {name} | {unit} | {fmt(k)} | {fmt(t)} | {ratio} | {target or ''} |")
    for name, error in kiln.get("errors", {}).items():
        print(f"\nkiln {name}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
