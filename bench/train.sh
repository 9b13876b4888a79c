#!/usr/bin/env bash
# Workload 4: training simulation in the style of MLPerf Storage. A Python
# (standard library) data loader with TRAIN_THREADS reader threads, a new
# shuffled sample order every epoch, batches of 32 and a fixed sleep per batch
# standing in for the accelerator; AU = compute time / wall time per epoch,
# time to first batch and total time (both including mounting, or the whole
# download for copy-first). Two datasets: the small files (ImageNet-like) and
# the large files read as shards (WebDataset-like, 128 KiB samples in order
# within a shard, shards shuffled). Cistern is measured twice: plain, and
# with `cistern load /` started at the same moment as training.
#
# The compute time per batch is calibrated here so that local disk reaches
# AU >= 0.98: first 2 x the time local disk (page cache dropped) takes to
# load a batch; then, while a local epoch at that compute time stays under
# AU 0.985 (at most 4 tries), scaled so that the time the epoch lost (its
# listing, its first batch, the loader's overhead per batch: wall less
# compute) is 1.5% of the compute. The local row of the table shows whether
# it got there. (2 x alone left the shards at AU 0.94.)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
threads=${TRAIN_THREADS:-8}
epochs=${TRAIN_EPOCHS:-2}
sn=${SMALL_FILES:-20000}
skib=${SMALL_KIB:-100}
ln=${LARGE_FILES:-8}
lmib=${LARGE_MIB:-128}
gen_files "$BENCH_DATA/small" "$sn" $((skib << 10)) 100
gen_files "$BENCH_DATA/large" "$ln" $((lmib << 20)) 1

local_epoch() { # DIR KIND MS -> one local epoch's JSON, page cache dropped
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	python3 "$BENCH_DIR/workload.py" train "$1" --kind "$2" --threads "$threads" \
		--compute-ms "$3" --epochs 1
}
calibrate() { # DIR KIND -> compute ms per batch
	local ms tries au next
	ms=$(local_epoch "$1" "$2" 0 |
		python3 -c 'import json,sys; r=json.load(sys.stdin); print(round(max(1.0, 2.0 * 32 / r["epochs"][0]["samples_per_s"] * 1000), 2))')
	for tries in 1 2 3 4; do
		# Done at AU 0.985; else scaled so that the time lost, (1 - AU) / AU
		# of the compute, becomes 1.5% of it.
		read -r au next < <(local_epoch "$1" "$2" "$ms" | python3 -c 'import json, sys
sys.path.insert(0, sys.argv[1])
from compare import epoch_au
au, ms = epoch_au(json.load(sys.stdin), 0), float(sys.argv[2])
print(round(au, 4), "" if au >= 0.985 else round(ms * max(1.25, (1 - au) / au * 0.985 / 0.015), 2))' \
			"$BENCH_DIR" "$ms")
		log "bench: calibration $2: ${ms} ms a batch gives local disk AU $au (try $tries)"
		[ -n "$next" ] || break
		ms=$next
	done
	echo "$ms"
}
small_ms=${TRAIN_SMALL_COMPUTE_MS:-$(calibrate "$BENCH_DATA/small" files)}
shard_ms=${TRAIN_SHARD_COMPUTE_MS:-$(calibrate "$BENCH_DATA/large" shards)}
log "bench: compute per batch: small files ${small_ms} ms, shards ${shard_ms} ms"

bench_store_up
bench_upload "$BENCH_DATA/small" small
bench_upload "$BENCH_DATA/large" large
# In quick mode (a shared machine) only the shaped store, which is the one
# that looks like cloud storage: the training runs are the longest of all.
stores=${TRAIN_STORES:-$BENCH_STORES}
[ "${BENCH_QUICK:-0}" = 1 ] && stores=${TRAIN_STORES:-shaped}
for store in $stores; do
	BENCH_SYSTEMS_OVERRIDE=${TRAIN_SYSTEMS:-limit,local,copyfirst,s3fs,rclone,cistern,cistern+load} \
		BENCH_COMPARE_FLAGS=--no-warm \
		bench_compare train-files "$store" small "$BENCH_DATA/small" \
		"{\"files\": $sn, \"kib\": $skib, \"threads\": $threads, \"batch\": 32, \"compute_ms\": $small_ms, \"epochs\": $epochs}" \
		-- train "{DIR}" --kind files --threads "$threads" --compute-ms "$small_ms" --epochs "$epochs"
	BENCH_SYSTEMS_OVERRIDE=${TRAIN_SYSTEMS:-limit,local,copyfirst,s3fs,rclone,cistern,cistern+load} \
		BENCH_COMPARE_FLAGS=--no-warm \
		bench_compare train-shards "$store" large "$BENCH_DATA/large" \
		"{\"files\": $ln, \"mib\": $lmib, \"sample_kib\": 128, \"threads\": $threads, \"batch\": 32, \"compute_ms\": $shard_ms, \"epochs\": $epochs}" \
		-- train "{DIR}" --kind shards --threads "$threads" --compute-ms "$shard_ms" --epochs "$epochs"
done
