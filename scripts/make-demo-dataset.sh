#!/usr/bin/env bash
# Generates Cistern's demo dataset once, in a local directory:
#   train/<class>/<class>_NNNN.jpg  an ImageFolder tree of small files
#                                   (CLASSES x PER_CLASS, 16..160 KiB, random bytes)
#   shards/shard-NNNN.tar           a few large shards (SHARDS x SHARD_MIB MiB),
#                                   WebDataset style (real tar files of samples)
# A marker file records the parameters; a second run with the same ones does
# nothing. Prints the directory on stdout.
# Usage: scripts/make-demo-dataset.sh [DIR]   (default ~/.cache/cistern/demo)
# Environment: CLASSES (10) PER_CLASS (200) SHARDS (4) SHARD_MIB (64)
set -euo pipefail

dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/cistern/demo}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd) # absolute: it becomes a file:// URI
classes=${CLASSES:-10}
per_class=${PER_CLASS:-200}
shards=${SHARDS:-4}
shard_mib=${SHARD_MIB:-64}
marker="$dir/.cistern-demo"
want="classes=$classes per_class=$per_class shards=$shards shard_mib=$shard_mib"

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$dir"
rm -f "$marker"
echo "make-demo-dataset: generating $want in $dir" >&2
python3 - "$dir" "$classes" "$per_class" "$shards" "$shard_mib" <<'PY'
import io, os, random, sys, tarfile

top, classes, per_class, shards, shard_mib = sys.argv[1], *map(int, sys.argv[2:])
rng = random.Random(42)  # same tree on every machine
for c in range(classes):
    d = os.path.join(top, "train", f"class_{c:03d}")
    os.makedirs(d, exist_ok=True)
    for i in range(per_class):
        size = rng.randint(16, 160) * 1024
        with open(os.path.join(d, f"class_{c:03d}_{i:04d}.jpg"), "wb") as f:
            f.write(os.urandom(size))
os.makedirs(os.path.join(top, "shards"), exist_ok=True)
for s in range(shards):
    path = os.path.join(top, "shards", f"shard-{s:04d}.tar")
    target = shard_mib << 20
    with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as t:
        n, written = 0, 0
        while written < target - (300 << 10):
            for ext, size in (("jpg", rng.randint(64, 256) * 1024), ("cls", 4)):
                data = os.urandom(size) if ext == "jpg" else str(n % classes).encode()
                ti = tarfile.TarInfo(f"{s:04d}{n:06d}.{ext}")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
                written += 512 + (size + 511) // 512 * 512
            n += 1
    os.replace(path + ".tmp", path)
PY
echo "$want" >"$marker"
echo "$dir"
