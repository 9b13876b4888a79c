#!/usr/bin/env bash
# Workload 3: metadata, find + lstat of a META_OBJECTS-object tree (100,000
# objects of 1 KiB in 1,000 directories), cold then warm. No data is read, so
# there is no curl limit here and copy-first is left out (it would time the
# download, not the metadata).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
n=${META_OBJECTS:-100000}
dirs=${META_DIRS:-1000}
gen_files "$BENCH_DATA/meta" "$n" 1024 "$dirs"
bench_store_up
bench_upload "$BENCH_DATA/meta" meta
for store in $BENCH_STORES; do
	BENCH_SYSTEMS_OVERRIDE=${META_SYSTEMS:-local,s3fs,rclone,cistern} \
		bench_compare meta "$store" meta "$BENCH_DATA/meta" "{\"objects\": $n, \"dirs\": $dirs}" \
		-- meta "{DIR}"
done
