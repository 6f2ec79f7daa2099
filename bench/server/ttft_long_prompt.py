#!/usr/bin/env python3
"""The server's share of time-to-first-token for a very long prompt.

A real `sluice serve --device sim` (DeepSeek-V4.1-Flash's cost profile, 1M-token
context, no pacing) gets one streaming completion whose prompt is ~300k
tokens; the server splits the first token's latency into tokenization, the
engine's time (submit -> first output pushed: queue and every prefill step)
and the rest, which is the server's own overhead (JSON parse of the body,
validation, worker and strand hand-offs, detokenizing and writing the first
chunk). The split is read from the server's debug line.

    bench/server/ttft_long_prompt.py build/sluice [prompt_tokens=300000] [rounds=5]

Standard library only, so it also runs on the GPU machine, whose 16 idle
cores are the quiet machine the < 1 ms target is measured on
(tools/device/ttft_bench.sh). A benchmark, not a test: it prints numbers for
docs/benchmarks.md.
"""
import http.client
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TIMING = re.compile(
    r"first token after ([\d.]+) ms = tokenize ([\d.]+) \+ engine \(submit to first output\) ([\d.]+)"
    r" \+ server ([\d.]+) \((\d+) prompt tokens; server: (.*)\)")


def text(seed, num_words):
    """Words from a fixed pseudo-random sequence (a new seed per round keeps the prefix cache cold)."""
    x = seed & 0xFFFFFFFF
    words = []
    for _ in range(num_words):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        length = 2 + (x >> 28) % 7
        words.append("".join(chr(97 + ((x >> (k * 3)) % 26)) for k in range(length)))
    return " ".join(words)


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
    response = conn.getresponse()
    data = response.read().decode()
    conn.close()
    return response.status, data


def main():
    sluice = str(Path(sys.argv[1] if len(sys.argv) > 1 else "build/sluice").resolve())
    target_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 300000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    work = Path(tempfile.mkdtemp(prefix="sluice-ttft-"))
    model = work / "model"
    subprocess.run([sluice, "make-model", "--arch", "llama", "--layers", "4", "--hidden", "256", "--heads", "8",
                    "--kv-heads", "4", "--intermediate", "688", "--vocab", "2048", "--seed", "1", "--out",
                    str(model)], check=True, stdout=subprocess.DEVNULL)
    server = subprocess.Popen(
        [sluice, "serve", "--model", str(model), "--device", "sim", "--sim-profile", "deepseek-v4.1-flash",
         "--tensor-parallel-size", "8", "--enable-expert-parallel",
         "--sim-speed", "0", "--max-model-len", str(target_tokens + 20000), "--kv-cache-memory", str(int(1e9)),
         "--max-request-body-bytes", str(64 << 20), "--port", "0", "--stats-log-interval", "0",
         "--log-level", "debug", "--served-model-name", "m"],
        stdout=subprocess.PIPE, text=True)
    port_found = threading.Event()
    port = [0]
    timing_lines = []
    lines_lock = threading.Lock()

    def read_log():  # spdlog writes to stdout, after the "listening on" line
        for line in server.stdout:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port[0] = int(m.group(1))
                port_found.set()
            if "first token after" in line:
                with lines_lock:
                    timing_lines.append(line)
        port_found.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        if not port_found.wait(60) or port[0] == 0:
            raise RuntimeError("server did not start")
        for _ in range(500):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port[0], timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.02)
        sample_words = 2000
        status, data = post(port[0], "/tokenize", {"prompt": text(1, sample_words)})
        tokens_per_word = json.loads(data)["count"] / sample_words
        num_words = round(target_tokens / tokens_per_word)
        results = []
        for round_index in range(rounds):
            prompt = text(1000 + round_index, num_words)
            with lines_lock:
                before = len(timing_lines)
            status, data = post(port[0], "/v1/completions",
                                {"model": "m", "prompt": prompt, "max_tokens": 1, "stream": True})
            if status != 200 or "[DONE]" not in data:
                raise RuntimeError(f"round {round_index}: {status} {data[:300]}")
            for _ in range(100):
                with lines_lock:
                    if len(timing_lines) > before:
                        break
                time.sleep(0.01)
            with lines_lock:
                m = TIMING.search(timing_lines[before]) if len(timing_lines) > before else None
            if not m:
                raise RuntimeError(f"no timing line for round {round_index}")
            results.append({"prompt_tokens": int(m.group(5)), "ttft_ms": float(m.group(1)),
                            "tokenize_ms": float(m.group(2)), "engine_ms": float(m.group(3)),
                            "server_overhead_ms": float(m.group(4)), "server_split": m.group(6),
                            "body_bytes": len(prompt.encode())})
        overheads = sorted(r["server_overhead_ms"] for r in results)
        print(json.dumps({"rounds": results, "median_server_overhead_ms": overheads[len(overheads) // 2],
                          "max_server_overhead_ms": overheads[-1]}, indent=2))
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
