#!/usr/bin/env python3
"""Test data for the FUSE integration tests.

  fuse_tree.py make DIR [NFILES] [BIG_MIB]
      a deterministic tree: NFILES files (default 2000), 6 levels deep,
      names with spaces and UTF-8, sizes from 0 B up with odd lengths, most
      small, a few of some MiB and one of BIG_MIB MiB (default 64);
      no empty directories (an object store has none)
  fuse_tree.py preads SRC MNT COUNT SEED
      COUNT random preads (file, offset, length) compared byte for byte
  fuse_tree.py s3put SRC PREFIX
      upload every file under SRC to $CIS_S3_ENDPOINT/$CIS_S3_BUCKET/PREFIX/
      with curl (SigV4), keys URL-encoded, 8 at a time
  fuse_tree.py gatedread PATH GATE_DIR
      read the first 16 MiB of PATH (one placement extent) in 1 MiB
      chunks, create GATE_DIR/paused,
      wait (at most 60 s) for GATE_DIR/go, read the rest; print its sha256
"""
import hashlib
import os
import random
import sys
import time

NAMES = ["plain", "with space", "ünïcödé", "日本語", "emoji 🙂", "dash-and_under", "x"]


def make(root, nfiles=2000, big_mib=64):
    rng = random.Random(42)
    dirs = [""]
    # Directories up to 6 levels deep.
    for i in range(60):
        parent = rng.choice(dirs)
        if parent.count("/") >= 5:
            parent = ""
        d = os.path.join(parent, "%s %d" % (rng.choice(NAMES), i)) if parent else "%s %d" % (rng.choice(NAMES), i)
        dirs.append(d)
    deep = "l1/l2 two/l3 drei/l4 ü/l5 五/l6 six"
    dirs.append(deep)
    sizes = []
    for i in range(nfiles):
        r = rng.random()
        if r < 0.05:
            sizes.append(0)
        elif r < 0.85:
            sizes.append(rng.randint(1, 20000))
        elif r < 0.995:
            sizes.append(rng.randint(20001, 120000))
        else:
            sizes.append(rng.randint(1 << 20, 3 << 20) + rng.randint(1, 4095))
    sizes[7] = big_mib << 20  # the one big file
    sizes[8] = (4 << 20) + 1  # one byte over a typical block
    sizes[9] = 4 << 20
    used = set()
    for i, size in enumerate(sizes):
        # Every directory gets at least one file, the deepest the first.
        d = dirs[-1] if i == 0 else (dirs[i % len(dirs)] if i < len(dirs) * 2 else rng.choice(dirs))
        name = "%s %04d%s" % (rng.choice(NAMES), i, rng.choice([".bin", ".txt", "", ".tar"]))
        path = os.path.join(root, d, name)
        if path in used:
            continue
        used.add(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            left = size
            seed = rng.getrandbits(64)
            block = random.Random(seed).randbytes(min(size, 1 << 20)) if size else b""
            n = 0
            while left > 0:
                chunk = block[: min(left, len(block))]
                # Vary each MiB so equal blocks never hide a misplaced one.
                f.write(chunk[:8] + n.to_bytes(8, "little") + chunk[16:] if len(chunk) > 16 else chunk)
                left -= len(chunk)
                n += 1


def files(root):
    out = []
    for dp, _, fns in os.walk(root):
        for fn in fns:
            out.append(os.path.relpath(os.path.join(dp, fn), root))
    return sorted(out)


def preads(src, mnt, count, seed):
    rng = random.Random(seed)
    fl = [f for f in files(src) if os.path.getsize(os.path.join(src, f)) > 0]
    bad = 0
    for i in range(count):
        f = rng.choice(fl)
        size = os.path.getsize(os.path.join(src, f))
        off = rng.randrange(0, size + 100)
        ln = rng.choice([1, 7, 4096, 65537, 1 << 20, (1 << 20) + 3, rng.randrange(1, 300000)])
        with open(os.path.join(src, f), "rb") as a, open(os.path.join(mnt, f), "rb") as b:
            x = os.pread(a.fileno(), ln, off)
            y = os.pread(b.fileno(), ln, off)
        if x != y:
            bad += 1
            print("pread mismatch: %r off=%d len=%d: %d vs %d bytes" % (f, off, ln, len(x), len(y)))
    if bad:
        sys.exit(1)
    print("preads ok: %d" % count)


def s3put(src, prefix):
    import concurrent.futures
    import subprocess
    import urllib.parse
    env = os.environ
    base = "%s/%s/%s/" % (env["CIS_S3_ENDPOINT"], env["CIS_S3_BUCKET"], prefix)

    def put(rel):
        url = base + urllib.parse.quote(rel, safe="/-_.~")
        r = subprocess.run(["curl", "-sSf", "-m", "120", "--aws-sigv4",
                            "aws:amz:%s:s3" % env["CIS_S3_REGION"], "--user",
                            "%s:%s" % (env["CIS_S3_ACCESS_KEY"], env["CIS_S3_SECRET_KEY"]),
                            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                            "-T", os.path.join(src, rel), "-o", "/dev/null", url],
                           capture_output=True, text=True)
        return rel, r.returncode, r.stderr

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        for rel, rc, err in ex.map(put, files(src)):
            if rc:
                sys.exit("upload %r failed: %s" % (rel, err.strip()))


def gatedread(path, gate):
    h = hashlib.sha256()
    first = min(16 << 20, os.path.getsize(path) // 2)
    done = 0
    with open(path, "rb") as f:
        while done < first:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            done += len(b)
        open(os.path.join(gate, "paused"), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(gate, "go")):
            if time.monotonic() > deadline:
                sys.exit("gatedread: no go after 60 s")
            time.sleep(0.05)
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    print(h.hexdigest())


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2000,
             int(sys.argv[4]) if len(sys.argv) > 4 else 64)
    elif cmd == "preads":
        preads(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "s3put":
        s3put(sys.argv[2], sys.argv[3])
    elif cmd == "gatedread":
        gatedread(sys.argv[2], sys.argv[3])
    else:
        sys.exit("unknown command " + cmd)
