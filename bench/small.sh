#!/usr/bin/env bash
# Workload 2: small files, SMALL_FILES x SMALL_KIB KiB (20,000 x 100 KiB) in
# 100 directories, every file read whole by 8 reader threads (the listing
# included), cold then warm; the store's limit is curl fetching the same
# objects 16 at a time.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
n=${SMALL_FILES:-20000}
kib=${SMALL_KIB:-100}
gen_files "$BENCH_DATA/small" "$n" $((kib << 10)) 100
bench_store_up
bench_upload "$BENCH_DATA/small" small
for store in $BENCH_STORES; do
	bench_compare small "$store" small "$BENCH_DATA/small" "{\"files\": $n, \"kib\": $kib, \"dirs\": 100}" \
		-- small "{DIR}" --threads 8
done
