#!/usr/bin/env bash
# A real PyTorch training job on a GPU machine, fed through a Cistern mount
# and, as the baseline of the same run, from local disk. For a machine with
# an NVIDIA GPU and PyTorch; Cistern's binaries and the libraries they need
# may come from elsewhere:
#
#   GPU_BIN   directory of cistern, cistern-master, -worker, -fuse (default:
#             the build tree's)
#   GPU_LIBS  prepended to LD_LIBRARY_PATH (libraries the machine lacks)
#   GPU_WORK  scratch directory: datasets, cache, mount (default /var/tmp/gpu-train)
#   GPU_RAW_SAMPLES, GPU_JPEG_SAMPLES  dataset sizes (64,000 and 24,000)
#   GPU_REPEATS  how many times the whole set runs, each on a fresh stack
#             (default 3; about 3 minutes each on an H100 with 16 cores)
#   OUT       where the results go (default $GPU_WORK/out): run*.json per
#             repeat and model, gpu-train-file.json (for bench/results/; in bench/kept/,
#             with a "kept" field saying when and where it was measured, it is
#             shown by runs without a GPU), metrics.txt,
#             cistern-logs.tar.gz (the last repeat's metrics and logs)
#
# The store is the datasets' directory itself (file://), so Cistern's cold
# epoch reads the same disk the baseline reads, writes its cache beside it and
# serves the reader through FUSE; the warm epoch reads the cache. The page
# cache is dropped before every epoch. Runs: ResNet-50 and ResNet-18 on raw
# 224x224 samples (storage-bound), ResNet-50 on JPEGs decoded in the loader
# (CPU-bound, the usual ImageNet shape).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
bin=${GPU_BIN:-$root/build}
work=${GPU_WORK:-/var/tmp/gpu-train}
out=${OUT:-$work/out}
mnt=$work/mnt
mkdir -p "$work" "$out" "$mnt"
[ -n "${GPU_LIBS:-}" ] && export LD_LIBRARY_PATH=$GPU_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -x "$bin/cli/cistern" ]; then
	cistern=$bin/cli/cistern
	bindir=()
else
	cistern=$bin/cistern
	bindir=(--bin-dir "$bin")
fi
export PATH=$bin:$PATH PYTHONUNBUFFERED=1
log() { echo "gpu-train: $(date +%T) $*" >&2; }

log "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 || exit 1
[ -c /dev/fuse ] || modprobe fuse 2>/dev/null || mknod /dev/fuse c 10 229 || true
df -h "$work" /dev/shm >&2
# The loader's workers hand batches over in /dev/shm: a small one kills them.
[ "$(df -k --output=size /dev/shm | tail -1)" -ge $((8 << 20)) ] ||
	mount -o remount,size=16G /dev/shm || true
"$cistern" --help >/dev/null 2>&1 || { "$cistern" --help; exit 1; }

gen() { # DIR SAMPLES FORMAT: made once, kept for later runs
	[ -d "$1" ] && return 0
	rm -rf "$1.part"
	python3 "$here/gpu_train.py" gen "$1.part" --samples "$2" --format "$3" >&2 || exit 1
	mv "$1.part" "$1"
}
gen "$work/data/raw" "${GPU_RAW_SAMPLES:-64000}" raw
gen "$work/data/jpeg" "${GPU_JPEG_SAMPLES:-24000}" jpeg

stack_up() { # a fresh stack every repeat: the cold epoch must find an empty cache
	"$cistern" local --stop "$mnt" --state-dir "$work/state" >/dev/null 2>&1
	rm -rf "$work/state" "$work/cache"
	"$cistern" local "file://$work/data" "$mnt" "${bindir[@]}" --state-dir "$work/state" \
		--cache-dir "$work/cache:30G" >&2 || {
		tail -n 30 "$work"/state/logs/*.log >&2
		exit 1
	}
}
trap '"$cistern" local --stop "$mnt" --state-dir "$work/state" >&2' EXIT

n=0
train() { # REPEAT MODEL RUN...: run<repeat>-<n>-<model>-<data>.json, named in order
	local rep=$1 model=$2
	shift 2
	n=$((n % 3 + 1))
	python3 "$here/gpu_train.py" train --model "$model" --drop-caches "$@" \
		>"$out/run$rep-$n-$model-$(basename "${1#*=}").json"
}
# Each epoch is a full pass over the dataset: cold, the first through Cistern.
rc=0
rm -f "$out"/run*.json
for rep in $(seq 1 "${GPU_REPEATS:-3}"); do
	log "repeat $rep"
	stack_up
	train "$rep" resnet50 local="$work/data/raw" cistern-cold="$mnt/raw" cistern-warm="$mnt/raw" || rc=1
	train "$rep" resnet18 local="$work/data/raw" cistern-warm="$mnt/raw" || rc=1
	train "$rep" resnet50 local="$work/data/jpeg" cistern-cold="$mnt/jpeg" cistern-warm="$mnt/jpeg" || rc=1
done
python3 - "$work/state/local.json" >"$out/metrics.txt" <<'EOF' || rc=1
import json, sys, urllib.request
ports = json.load(open(sys.argv[1]))
for name in ("worker", "fuse"):
    url = "http://127.0.0.1:%d/metrics" % ports[name + "_http_port"]
    for line in urllib.request.urlopen(url).read().decode().splitlines():
        if not line.startswith("#") and not line.endswith(" 0"):
            print(line)
EOF
python3 "$here/gpu_train.py" report "$out"/run*.json >"$out/gpu-train-file.json" || rc=1
python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["table"]["rows"]:
    print("%-9s %-4s %-13s %7s img/s  GPU %5s %%  wait %s  vs local %s" % (*r[:5], r[5], r[8]))' \
	"$out/gpu-train-file.json"
tar -C "$work/state" -czf "$out/cistern-logs.tar.gz" logs 2>/dev/null
exit $rc
