"""Library baselines measured in the same run as sluice's CUDA benchmark:
torch SDPA attention (cuDNN and FlashAttention-2 backends) at the shapes of
bench/cuda/cuda_bench.cpp, and cuBLAS GEMMs through torch.matmul. Prints
markdown rows like cuda_bench does. Runs on the GPU machine's python3.
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

FLOPS = 790e12
QUICK = "--quick" in sys.argv


def median_seconds(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def device_copy_rate():
    """This card's device-to-device copy, read + write counted: the "of HBM" shares'
    ceiling, timed here because the device tool may lend an H100 or an H200."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    return 2.0 * src.numel() / median_seconds(lambda: dst.copy_(src))


HBM = device_copy_rate()
print(f"device: {torch.cuda.get_device_name()}; {HBM / 1e12:.2f} TB/s device copy (the \"of HBM\" shares)\n", flush=True)


def row(what, value, unit, share):
    print(f"| {what} | {value:.4g} {unit} | {share} |", flush=True)


def prefill(backend, name, tokens, heads=32, dim=128):
    q, k, v = (torch.randn(1, heads, tokens, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    try:
        with sdpa_kernel(backend):
            t = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 2, 7)
    except RuntimeError as e:
        print(f"| torch {name} prefill {tokens // 1024}k | n/a | {str(e).splitlines()[0][:60]} |")
        return
    flops = 4.0 * heads * dim * tokens * (tokens + 1) / 2
    row(f"torch SDPA {name} prefill {tokens // 1024}k, 32 heads x 128", flops / t / 1e12, "TFLOP/s",
        f"{100 * flops / t / FLOPS:.1f}% of 790")


def chunk_over_prefix(backend, name, prefix, chunk, heads=32, dim=128):
    """cuda_bench --chunk's shapes: `chunk` query rows at the end of `prefix` +
    `chunk` keys, causal aligned bottom-right (K/V heads repeated to 32)."""
    from torch.nn.attention.bias import causal_lower_right
    q = torch.randn(1, heads, chunk, dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, heads, prefix + chunk, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    bias = causal_lower_right(chunk, prefix + chunk)
    try:
        with sdpa_kernel(backend):
            t = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias), 2, 7)
    except RuntimeError as e:
        print(f"| torch {name} chunk {chunk} over {prefix // 1000}k | n/a | {str(e).splitlines()[0][:60]} |")
        return
    flops = 4.0 * heads * dim * chunk * (prefix + (chunk + 1) / 2.0)
    row(f"torch SDPA {name} chunk {chunk} over {prefix // 1000}k prefix ({t * 1e3:.3f} ms)", flops / t / 1e12,
        "TFLOP/s", f"{100 * flops / t / FLOPS:.1f}% of 790")


def mla_prefill(tokens, heads=128, qk=192, v_dim=128):
    """MLA prefill's attention alone (decompressed: QK 192, V 128, 128 heads),
    causal, through torch's cuDNN backend: the anchor of issue 15's target."""
    q, k = (torch.randn(1, heads, tokens, qk, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(1, heads, tokens, v_dim, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            t = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 2, 5)
    except RuntimeError as e:
        print(f"| torch cuDNN MLA prefill {tokens // 1024}k | n/a | {str(e).splitlines()[0][:60]} |")
        return
    flops = 2.0 * heads * tokens * (tokens + 1) / 2 * (qk + v_dim)
    row(f"torch SDPA cuDNN MLA prefill {tokens // 1024}k, 128 heads QK 192 / V 128, attention alone ({t * 1e3:.1f} ms)",
        flops / t / 1e12, "TFLOP/s", f"{100 * flops / t / FLOPS:.1f}% of 790")


def decode(backend, name, batch, context, heads=32, dim=128):
    q = torch.randn(batch, heads, 1, dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, heads, context, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    try:
        with sdpa_kernel(backend):
            t = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v), 3, 15)
    except RuntimeError as e:
        print(f"| torch {name} decode | n/a | {str(e).splitlines()[0][:60]} |")
        return
    nbytes = 2.0 * 2 * batch * context * heads * dim
    row(f"torch SDPA {name} decode {batch} x {context // 1024}k, 32 heads x 128 (K+V bytes)", nbytes / t / 1e12,
        "TB/s", f"{100 * nbytes / t / HBM:.1f}% of HBM")


def gemm(m, n, k):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05 for _ in range(4 if m <= 64 else 1)]
    i = [0]

    def run():
        for _ in range(20):
            torch.matmul(x, ws[i[0] % len(ws)].t())
            i[0] += 1

    t = median_seconds(run, 3, 9) / 20
    if m >= 1024:
        flops = 2.0 * m * n * k
        row(f"torch.matmul {m}x{n}x{k}", flops / t / 1e12, "TFLOP/s", f"{100 * flops / t / FLOPS:.1f}% of 790")
    else:
        nbytes = 2.0 * (m * k + n * k + m * n)
        row(f"torch.matmul {m}x{n}x{k}", nbytes / t / 1e12, "TB/s", f"{100 * nbytes / t / HBM:.1f}% of HBM")


def main():
    print("| what (library baseline, same run) | value | share of the ceiling |\n| --- | --- | --- |")
    # --prefill-attention: the rows of cuda_bench --prefill-attention (whole
    # prompts, then chunks over prefixes); --chunk: the chunks only.
    if "--prefill-attention" in sys.argv:
        for tokens in [8192, 32768]:
            prefill(SDPBackend.CUDNN_ATTENTION, "cuDNN", tokens)
            prefill(SDPBackend.FLASH_ATTENTION, "flash", tokens)
    if "--mla" in sys.argv:
        for tokens in [8192, 32768]:
            mla_prefill(tokens)
        return
    if "--chunk" in sys.argv or "--prefill-attention" in sys.argv:
        for prefix, chunk in [(32768, 256), (32768, 1024), (32768, 2048), (65536, 256), (65536, 1024),
                              (65536, 2048), (131072, 256), (131072, 1024), (131072, 2048), (100000, 256)]:
            chunk_over_prefix(SDPBackend.CUDNN_ATTENTION, "cuDNN", prefix, chunk)
            chunk_over_prefix(SDPBackend.FLASH_ATTENTION, "flash", prefix, chunk)
        return
    for m, n, k in [(8192, 8192, 8192), (8192, 28672, 4096), (1, 28672, 4096), (1, 128256, 4096)]:
        gemm(m, n, k)
    for tokens in ([4096] if QUICK else [8192, 32768]):
        prefill(SDPBackend.CUDNN_ATTENTION, "cuDNN", tokens)
        prefill(SDPBackend.FLASH_ATTENTION, "flash", tokens)
    context = 2048 if QUICK else 8192
    decode(SDPBackend.CUDNN_ATTENTION, "cuDNN", 64, context)
    decode(SDPBackend.FLASH_ATTENTION, "flash", 64, context)


if __name__ == "__main__":
    main()
