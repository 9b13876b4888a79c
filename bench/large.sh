#!/usr/bin/env bash
# Workload 1: large sequential files, LARGE_FILES x LARGE_MIB MiB (8 x 128
# MiB), read whole with 1 MiB reads (8 reader threads, one file each), cold
# then warm, against every system and the store's limit (curl, 16 parallel
# 16 MiB ranged GETs), on the plain and the shaped store.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
n=${LARGE_FILES:-8}
mib=${LARGE_MIB:-128}
gen_files "$BENCH_DATA/large" "$n" $((mib << 20)) 1
bench_store_up
bench_upload "$BENCH_DATA/large" large
for store in $BENCH_STORES; do
	bench_compare large "$store" large "$BENCH_DATA/large" "{\"files\": $n, \"mib\": $mib}" \
		-- seq "{DIR}" --threads 8 --bs 1M
done
