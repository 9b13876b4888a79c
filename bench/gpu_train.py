#!/usr/bin/env python3
"""A real PyTorch training loop on a GPU, fed from a directory (a Cistern
mount or local disk), reporting GPU utilization and throughput per run.

  gen DIR --samples N [--format raw|jpeg]      write an ImageNet-like dataset
  train --model resnet50 [--workers 12] [--batch 256] [--drop-caches]
        LABEL=DIR [LABEL=DIR ...]             one epoch per LABEL=DIR, in order
  report TRAIN.json...                         the runs as a bench/report.py table

raw: one file per sample, 3x224x224 uint8 (147 KiB), so the loader does
almost no work beyond reading: the run shows whether the storage keeps the
GPU busy. jpeg: 500x375 JPEG files (about 60 KiB) decoded and randomly
cropped in the loader's workers, as an ImageNet job does: CPU-bound, so it
shows what the FUSE client's CPU costs the decoders.

The model runs in bf16 autocast, channels-last, SGD, after 10 warm-up steps
on batches made on the GPU. Each epoch is timed whole, from the loader's start
(the page cache dropped just before) to the end of its last step. GPU
utilization is NVML's (the share of time a kernel was running), sampled every
50 ms over the epoch; data wait is the share of it the training loop spent
blocked on the loader; CPU busy is the machine's, in cores. Prints one JSON
object.
"""
import argparse
import json
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import drop_caches  # noqa: E402

SIDE = 224
RAW_BYTES = 3 * SIDE * SIDE
WARMUP_STEPS = 10  # on GPU-made batches, before the first epoch
MEAN = STD = None  # normalization constants, on the GPU once torch is up


def gen_one(args):
    top, fmt, i = args
    rng = random.Random(i)
    d = os.path.join(top, "%03d" % (i % 100))
    if fmt == "raw":
        path = os.path.join(d, "%07d.bin" % i)
        data = rng.randbytes(RAW_BYTES)
    else:
        import io

        import numpy as np
        from PIL import Image

        # Smooth noise: compresses like a photograph (about 60 KiB), not
        # like white noise (several times bigger) or a flat colour (tiny).
        base = np.random.default_rng(i).integers(0, 256, (47, 63, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize((500, 375), Image.BICUBIC)
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        path = os.path.join(d, "%07d.jpg" % i)
        data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def cmd_gen(a):
    from multiprocessing import Pool

    for k in range(100):
        os.makedirs(os.path.join(a.dir, "%03d" % k), exist_ok=True)
    t0 = time.time()
    with Pool(os.cpu_count()) as p:
        total = sum(p.imap_unordered(gen_one, [(a.dir, a.format, i) for i in range(a.samples)], 64))
    json.dump({"dir": a.dir, "samples": a.samples, "format": a.format, "bytes": total,
               "seconds": round(time.time() - t0, 1)}, sys.stdout)
    print()


def cpu_ticks():
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


class Files:
    """The dataset: every file under top, label = index mod 1000."""

    def __init__(self, top):
        self.paths = []
        for d, _, files in os.walk(top):
            self.paths += [os.path.join(d, f) for f in files]
        self.paths.sort()
        if not self.paths:
            raise SystemExit("no files under %s" % top)
        self.jpeg = self.paths[0].endswith(".jpg")

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import torch

        with open(self.paths[i], "rb", buffering=0) as f:
            data = f.read()
        if self.jpeg:
            import torchvision.transforms.v2.functional as F
            from torchvision.io import decode_jpeg

            img = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            h, w = img.shape[-2:]
            s = random.randint(min(h, w) // 2, min(h, w))
            y, x = random.randint(0, h - s), random.randint(0, w - s)
            img = F.resized_crop(img, y, x, s, s, [SIDE, SIDE], antialias=True)
            if random.random() < 0.5:
                img = F.horizontal_flip(img)
        else:
            if len(data) != RAW_BYTES:
                raise IOError("%s: %d bytes, expected %d" % (self.paths[i], len(data), RAW_BYTES))
            img = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(3, SIDE, SIDE)
        return img, i % 1000


class GpuSampler:
    """NVML utilization every 50 ms on a thread, between start() and stop()."""

    def __init__(self):
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples = []
        self.running = False

    def start(self):
        self.samples = []
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while self.running:
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
            time.sleep(0.05)

    def stop(self):
        self.running = False
        self.thread.join()
        return sum(self.samples) / max(1, len(self.samples))


def train_step(model, opt, x, y):
    import torch

    x = x.cuda(non_blocking=True).float().sub_(MEAN).div_(STD)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y.cuda(non_blocking=True))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def one_epoch(a, label, top, model, opt, gpu):
    """A whole epoch, timed from the loader's start (the page cache dropped
    just before) to the last step's end: nothing is left out, so neither the
    loader's head start nor its ramp-up flatters one side."""
    import torch
    from torch.utils.data import DataLoader

    ds = Files(top)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                    pin_memory=True, drop_last=True, prefetch_factor=4)
    cached = drop_caches() if a.drop_caches else False
    wait = 0.0
    steps = 0
    first_batch = None
    cpu0 = cpu_ticks()
    gpu.start()
    t_start = time.time()
    it = iter(dl)
    while True:
        t0 = time.time()
        try:
            x, y = next(it)
        except StopIteration:
            break
        t1 = time.time()
        wait += t1 - t0
        if first_batch is None:
            first_batch = t1 - t_start
        loss = train_step(model, opt, x, y)
        steps += 1
    torch.cuda.synchronize()
    secs = time.time() - t_start
    util = gpu.stop()
    cpu1 = cpu_ticks()
    busy = (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1]) * os.cpu_count()
    return {"label": label, "dir": top, "samples": len(ds), "steps": steps,
            "page_cache_dropped": cached, "first_batch_s": round(first_batch or 0, 2),
            "epoch_s": round(secs, 2), "images_per_s": round(steps * a.batch / secs, 1),
            "gpu_util_pct": round(util, 1), "cpu_busy_cores": round(busy, 1),
            "data_wait_frac": round(wait / secs, 3),
            "loss": round(loss.item(), 3) if steps else None}


def cmd_train(a):
    import torch
    import torchvision

    global MEAN, STD
    torch.backends.cudnn.benchmark = True
    MEAN = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    STD = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    model = getattr(torchvision.models, a.model)(num_classes=1000).cuda()
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    # cuDNN picks its kernels on the first steps: do that before any epoch
    # is timed, on batches made on the GPU.
    for _ in range(WARMUP_STEPS):
        x = torch.randint(0, 256, (a.batch, 3, SIDE, SIDE), dtype=torch.uint8, device="cuda")
        train_step(model, opt, x, torch.randint(0, 1000, (a.batch,), device="cuda"))
    torch.cuda.synchronize()
    gpu = GpuSampler()
    out = {"model": a.model, "batch": a.batch, "workers": a.workers, "cores": os.cpu_count(),
           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": []}
    for spec in a.runs:
        label, _, top = spec.partition("=")
        r = one_epoch(a, label, top, model, opt, gpu)
        print(json.dumps(r), file=sys.stderr, flush=True)
        out["runs"].append(r)
    json.dump(out, sys.stdout)
    print()


def cmd_report(a):
    """The runs as one result set of bench/report.py's table kind: each
    Cistern epoch set against the local-disk epoch of the same invocation,
    and every figure the median over the repeats (invocations of one model
    on one dataset)."""
    groups, order, gpu, cores = {}, [], "", 0
    for path in a.files:
        with open(path) as f:
            text = f.read().strip()
        if not text:
            continue
        r = json.loads(text)
        gpu, cores = r["gpu"], r.get("cores", 0)
        local = next((x for x in r["runs"] if x["label"] == "local"), None)
        for x in r["runs"]:
            data = "jpeg" if x["dir"].rstrip("/").endswith("jpeg") else "raw"
            key = (r["model"], data, x["label"])
            if key not in groups:
                groups[key] = []
                order.append(key)
            vs = x["images_per_s"] / local["images_per_s"] if local and local["images_per_s"] else None
            groups[key].append(dict(x, vs=vs))
    rows, targets, repeats = [], [], 0
    for key in order:
        g = groups[key]
        repeats = max(repeats, len(g))

        def med(field):
            vals = [x.get(field) for x in g if x.get(field) is not None]
            return statistics.median(vals) if vals else None

        vs = med("vs")
        rows.append([*key, "{:,.0f}".format(med("images_per_s")), "%.1f" % med("gpu_util_pct"),
                     "%.2f" % med("data_wait_frac"), "%.1f" % (med("cpu_busy_cores") or 0),
                     "%.2f" % med("first_batch_s"), "%.2f" % vs if vs else "—"])
        if key[2] == "cistern-warm" and vs is not None:
            targets.append(("%s %s warm, images/s against local disk" % key[:2], vs, 0.9))
    json.dump({"benchmark": "gpu-train", "store": "file",
               "params": {"GPU": gpu, "CPU cores": cores, "batch": 256, "loader workers": 12},
               "repeats": repeats,
               "table": {"columns": ["model", "data", "run", "images/s", "GPU util %",
                                     "data wait", "CPU busy (cores)", "first batch (s)",
                                     "vs local"], "rows": rows},
               "extra": "One whole epoch per row and repeat, page cache dropped before each, "
                        "timed from the loader's start to the last step (bench/gpu_train.py); "
                        "each figure is the median over the repeats, and 'vs local' the median "
                        "of the ratios to the local-disk epoch of the same repeat. The store "
                        "is a directory on the same disk as the local copy; cold is the first "
                        "epoch through a fresh mount (Cistern fills its cache as it serves), "
                        "warm the next one.",
               "targets": targets}, sys.stdout, indent=1)
    print()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("dir")
    g.add_argument("--samples", type=int, required=True)
    g.add_argument("--format", choices=["raw", "jpeg"], default="raw")
    t = sub.add_parser("train")
    t.add_argument("runs", nargs="+", help="LABEL=DIR")
    t.add_argument("--model", default="resnet50")
    t.add_argument("--workers", type=int, default=12)
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--drop-caches", action="store_true")
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+", help="outputs of train")
    a = p.parse_args()
    {"gen": cmd_gen, "train": cmd_train, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
