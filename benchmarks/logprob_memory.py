"""Peak memory of chunked vs naive token log-probabilities (CPU, resident set size).

Compares, for logits of shape ``[B, T, V]`` (default B=4, T=2048, V=32000):

- **naive**: ``log_softmax(logits.float(), -1).gather(-1, targets)`` (what the chunked
  function replaces; it builds float32 ``[B, T, V]`` tensors);
- **chunked**: :func:`slca_lightning.training.losses.token_logprobs` (gathered logit − chunked
  logsumexp, chunked softmax recomputation in backward),

for a forward pass alone and for forward + backward (``.sum().backward()``; the gradient
w.r.t. the logits, ``[B, T, V]`` in the logits' dtype, is part of both).

How it measures: every (variant, pass, dtype) runs in its own fresh Python subprocess.
The child allocates the inputs (filled row-block by row-block so that creating them needs
no big temporary), records its resident set size (RSS, ``/proc/self/status`` VmRSS) just
before the measured call, runs it, and exits. The parent collects that child's own peak
RSS from ``os.wait4`` (``ru_maxrss``, per child, not the cumulative RUSAGE_CHILDREN).
"Δ peak" = child peak RSS − RSS before the call: the memory the call itself needed on
top of its inputs. Large PyTorch CPU blocks are ``mmap``-ed and returned to the OS on
free, so RSS tracks live tensors; it also counts only pages actually touched.

Usage::

    python benchmarks/logprob_memory.py           # B=4, T=2048, V=32000 (~1 min, ~6 GB)
    python benchmarks/logprob_memory.py --small   # B=2, T=128, V=4096, bf16: ~10 s
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"bf16": "bfloat16", "fp32": "float32"}


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("VmRSS not found in /proc/self/status")


def _child(variant: str, mode: str, dtype_name: str, B: int, T: int, V: int, chunk: int) -> None:
    """Run one measured call and print a JSON line (runs in its own process)."""
    sys.path.insert(0, str(REPO_ROOT))
    import torch

    from slca_lightning.logprobs.chunked import token_logprobs

    torch.manual_seed(0)
    dtype = getattr(torch, DTYPES[dtype_name])
    logits = torch.empty(B, T, V, dtype=dtype)
    flat = logits.view(B * T, V)
    step = max(1, (8 << 20) // (4 * V))  # ≤ 8 MB float32 temporary per block
    for start in range(0, B * T, step):
        flat[start : start + step] = torch.randn(min(step, B * T - start), V)
    targets = torch.randint(0, V, (B, T))
    backward = mode == "fwd+bwd"
    if backward:
        logits.requires_grad_()

    def naive():
        return (
            torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        )

    def chunked():
        return token_logprobs(logits, targets, chunk_size=chunk)

    fn = naive if variant == "naive" else chunked
    # warm up kernels / allocator on a tiny slice so that one-off costs are not measured
    _ = token_logprobs(logits[:1, :2].detach(), targets[:1, :2])
    baseline = _rss_mb()
    t0 = time.perf_counter()
    if backward:
        out = fn()
        out.sum().backward()
    else:
        with torch.no_grad():
            out = fn()
    seconds = time.perf_counter() - t0
    print(json.dumps({"baseline_mb": baseline, "seconds": seconds, "checksum": float(out.sum())}))


def _run_child(variant: str, mode: str, dtype: str, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_child",
        variant,
        mode,
        dtype,
        str(args.B),
        str(args.T),
        str(args.V),
        str(args.chunk_size),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # read the pipe to EOF first, then reap with wait4 to get this child's own rusage
    output = proc.stdout.read()
    proc.stdout.close()
    _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"child {variant}/{mode}/{dtype} failed ({proc.returncode}):\n{output}")
    result = json.loads(output.strip().splitlines()[-1])
    result["peak_mb"] = rusage.ru_maxrss / 1024.0  # Linux: KiB
    result["delta_mb"] = result["peak_mb"] - result["baseline_mb"]
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_child":
        variant, mode, dtype, B, T, V, chunk = argv[1:8]
        _child(variant, mode, dtype, int(B), int(T), int(V), int(chunk))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="B=2, T=128, V=4096: a quick run")
    parser.add_argument("--B", type=int, default=4)
    parser.add_argument("--T", type=int, default=2048)
    parser.add_argument("--V", type=int, default=32000)
    parser.add_argument("--chunk-size", type=int, default=1024)
    parser.add_argument(
        "--dtypes", default=None, help="comma list of bf16, fp32 (default both; bf16 with --small)"
    )
    args = parser.parse_args(argv)
    if args.small:
        args.B, args.T, args.V, args.chunk_size = 2, 128, 4096, 64
    if args.dtypes is None:
        args.dtypes = "bf16" if args.small else "bf16,fp32"
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in DTYPES:
            parser.error(f"unknown dtype {d!r}; choose from {', '.join(DTYPES)}")

    import torch  # only for the header

    logits_mb = {d: args.B * args.T * args.V * (2 if d == "bf16" else 4) / 2**20 for d in dtypes}
    print(
        f"Token log-prob peak memory: B={args.B}, T={args.T}, V={args.V}, "
        f"chunk_size={args.chunk_size} rows, torch {torch.__version__}, CPU"
    )
    print()
    print(
        "Measured: per-variant fresh subprocess; Δ peak = the child's peak RSS (os.wait4 "
        "ru_maxrss) minus its RSS just before the call, i.e. memory the call needed on top "
        "of its already-allocated inputs. fwd+bwd includes the [B, T, V] gradient of the "
        "logits (logits' dtype) in both variants. Logits alone: "
        + ", ".join(f"{d} {logits_mb[d]:.0f} MB" for d in dtypes)
        + "."
    )
    print()
    print(
        "| logits dtype | pass | naive Δ peak (MB) | chunked Δ peak (MB) | naive / chunked "
        "| naive peak RSS (MB) | chunked peak RSS (MB) | naive s | chunked s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for d in dtypes:
        for mode in ("fwd", "fwd+bwd"):
            naive = _run_child("naive", mode, d, args)
            chunked = _run_child("chunked", mode, d, args)
            if abs(naive["checksum"] - chunked["checksum"]) > 1e-3 * max(
                1.0, abs(naive["checksum"])
            ):
                raise RuntimeError(
                    f"variants disagree: {naive['checksum']} vs {chunked['checksum']}"
                )
            ratio = naive["delta_mb"] / max(chunked["delta_mb"], 1e-9)
            print(
                f"| {d} | {mode} | {naive['delta_mb']:.0f} | {chunked['delta_mb']:.0f} | "
                f"{ratio:.1f}× | {naive['peak_mb']:.0f} | {chunked['peak_mb']:.0f} | "
                f"{naive['seconds']:.2f} | {chunked['seconds']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
