#!/usr/bin/env python3
"""PyTorch references for ptrun's CUDA path, run by scripts/gpucheck.sh on a GPU machine.

  torch_ref.py kernels            the shapes of build/bench_kernels_cuda through PyTorch:
                                  GEMMs, SDPA (flash) forward and backward, layer norm,
                                  cross-entropy, fused AdamW; one line per case
  torch_ref.py gpt2 --model 124m --batch B --seq 1024 --steps N
                                  GPT-2 trained the way a PyTorch user would write it
                                  today: bf16 autocast, torch.compile, SDPA flash
                                  attention, fused AdamW; prints tokens/s
      ... --profile N             then N more steps under torch.profiler: the GPU
                                  kernels by device time per step, to set beside
                                  ptrun's per-op medians (gpucheck's tables)

Times are CUDA-event medians after warm-up. The GPT-2 here is the model ptrun trains:
learned positions, pre-norm blocks, GELU (tanh) MLP of 4h, tied token embedding and
head, the vocabulary given by --vocab (by default ptrun's: GPT-2's 50257 padded to
a multiple of 128, as nanoGPT and Megatron-LM pad it).
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# GPT-2 sizes (Radford et al. 2019, table 2): layers, hidden, heads
GPT2 = {"124m": (12, 768, 12), "350m": (24, 1024, 16), "774m": (36, 1280, 20),
        "1.5b": (48, 1600, 25)}


def median_ms(fn, warmup=3, reps=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def kernels(args):
    dev = "cuda"
    bf = torch.bfloat16
    print("torch kernels: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    print("%-22s %10s %10s" % ("case", "ms", "TF/s|GB/s"))
    for name, n, ic, oc in [("gpt2 qkv", 8192, 768, 2304), ("gpt2 fc", 8192, 768, 3072),
                            ("llama7b qkv", 8192, 4096, 12288), ("llama7b up", 8192, 4096, 11008),
                            ("llama7b down", 8192, 11008, 4096), ("odd", 1000, 999, 1001)]:
        x = torch.randn(n, ic, device=dev, dtype=bf)
        w = torch.randn(oc, ic, device=dev, dtype=bf)
        ms = median_ms(lambda: F.linear(x, w))
        print("%-22s %10.3f %10.1f" % ("matmul " + name, ms, 2 * n * ic * oc / ms / 1e9))
    for d in (64, 128):
        for s in (1024, 2048, 4096, 8192):
            b, a = 16384 // s, 16
            q, k, v = (torch.randn(b, a, s, d, device=dev, dtype=bf, requires_grad=True)
                       for _ in range(3))
            flops = 2.0 * b * a * s * s * d  # causal: QK^T and PV over half the square
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                ms_f = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                g = torch.randn_like(o)
                ms_b = median_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
            print("%-22s %10.3f %10.1f" % ("sdpa fwd d%d s%d" % (d, s), ms_f, flops / ms_f / 1e9))
            print("%-22s %10.3f %10.1f" % ("sdpa bwd d%d s%d" % (d, s), ms_b,
                                            2.5 * flops / ms_b / 1e9))
    rows, h = 16384, 4096
    x = torch.randn(rows, h, device=dev, dtype=bf)
    ln = nn.LayerNorm(h, device=dev, dtype=bf)
    ms = median_ms(lambda: ln(x))
    print("%-22s %10.3f %10.1f" % ("layernorm_forward", ms, 4 * rows * h / ms / 1e6))
    v = 32768
    ce_rows = (64 << 20) // v
    logits = torch.randn(ce_rows, v, device=dev, dtype=bf)
    tgt = torch.randint(0, v, (ce_rows,), device=dev)
    ms = median_ms(lambda: F.cross_entropy(logits.float(), tgt))
    print("%-22s %10.3f %10.1f" % ("crossentropy", ms, 4 * ce_rows * v / ms / 1e6))
    p = torch.zeros(64 << 20, device=dev, dtype=torch.float32, requires_grad=True)
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=3e-4, fused=True)
    ms = median_ms(opt.step)
    # fp32 weights, gradients and both moments read, weights and moments written: 28 B
    print("%-22s %10.3f %10.1f" % ("adamw fused (fp32)", ms, 28 * p.numel() / ms / 1e6))


class Block(nn.Module):
    def __init__(self, h, a):
        super().__init__()
        self.a = a
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 4 * h)
        self.out = nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.a, h // self.a).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, a, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, a) for _ in range(layers))
        self.lnf = nn.LayerNorm(h)
        # GPT-2's initialisation: N(0, 0.02) weights, zero biases, the residual
        # projections scaled by 1/sqrt(2·layers) (Radford et al. 2019, section 2.3)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, tgt):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tgt.view(-1))


def kernel_table(events, steps, top):
    """Lines of the `top` kernels by device time per step, from torch.profiler's
    key_averages() over `steps` steps: ms per step, launches per step, name."""
    rows = []
    for e in events:
        # self_device_time_total since PyTorch 2.4 (microseconds); self_cuda_time_total before
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            rows.append((us / 1e3 / steps, e.count / steps, e.key))
    rows.sort(key=lambda r: -r[0])
    total = sum(r[0] for r in rows)
    out = ["%9s %7s  %s" % ("ms/step", "calls", "kernel")]
    out += ["%9.3f %7.1f  %s" % (ms, n, name[:90]) for ms, n, name in rows[:top]]
    out.append("%9.3f %7s  all %d kernels" % (total, "", len(rows)))
    return out


def gpt2(args):
    layers, h, a = GPT2[args.model]
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(layers, h, a, args.vocab, args.seq).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    step_fn = torch.compile(model) if not args.no_compile else model
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")

    def step():
        for _ in range(args.accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_fn(idx, tgt) / args.accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    print("torch gpt2-%s: %d parameters, batch %d x %d (accum %d), warm-up %.1f s" %
          (args.model, n_params, args.batch, args.seq, args.accum, time.time() - t0))
    times = []
    for _ in range(args.steps):
        t = time.time()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.time() - t)
    med = statistics.median(times)
    tokens = args.batch * args.seq * args.accum
    # MFU is left to scripts/gpucheck.sh, which counts FLOPs as ptrun does (the planner's
    # op lists), so the two are compared on one count
    print("torch gpt2-%s: step %.4f s median of %d, %.0f tokens/s, loss %.4f, "
          "peak memory %.1f GiB" %
          (args.model, med, args.steps, tokens / med, loss.item() * args.accum,
           torch.cuda.max_memory_allocated() / 2**30))
    if args.profile > 0:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.profile):
                step()
            torch.cuda.synchronize()
        print("torch gpt2-%s: GPU kernels over %d profiled steps" % (args.model, args.profile))
        for line in kernel_table(prof.key_averages(), args.profile, 40):
            print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("kernels")
    g = sub.add_parser("gpt2")
    g.add_argument("--model", choices=sorted(GPT2), default="124m")
    g.add_argument("--batch", type=int, default=16)
    g.add_argument("--seq", type=int, default=1024)
    g.add_argument("--accum", type=int, default=1)
    g.add_argument("--vocab", type=int, default=50304)  # ptrun pads 50257 to 128s
    g.add_argument("--steps", type=int, default=20)
    g.add_argument("--warmup", type=int, default=5)
    g.add_argument("--no-compile", action="store_true")
    g.add_argument("--profile", type=int, default=0, metavar="N",
                   help="then N steps under torch.profiler: kernels by device time")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_ref.py: no CUDA device")
    (kernels if args.cmd == "kernels" else gpt2)(args)


if __name__ == "__main__":
    main()
