#!/usr/bin/env bash
# The master's `ls -R` of META_OBJECTS objects in META_DIRS prefixes (100,000
# in 1,000) against a plain ListObjectsV2 walk of the same tree, on the plain
# and the shaped store (bench/master_ls.py). Shares its dataset with meta.sh.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
n=${META_OBJECTS:-100000}
dirs=${META_DIRS:-1000}
gen_files "$BENCH_DATA/meta" "$n" 1024 "$dirs"
bench_store_up
bench_upload "$BENCH_DATA/meta" meta
for store in $BENCH_STORES; do
	case $store in plain) ep=$PLAIN_ENDPOINT ;; shaped) ep=$SHAPED_ENDPOINT ;; esac
	python3 "$BENCH_DIR/master_ls.py" --endpoint "$ep" --bucket "$CIS_S3_BUCKET" --prefix meta \
		--region "$CIS_S3_REGION" --access-key "$BENCH_ACCESS_KEY" \
		--secret-key "$BENCH_SECRET_KEY" --master "$CIS_BUILD/master/cistern-master" \
		--cli "$CIS_BUILD/cli/cistern" --repeats "$BENCH_REPEATS" --work-dir "$BENCH_DATA" \
		--store-label "$store" --params "{\"objects\": $n, \"prefixes\": $dirs}" \
		--out "$BENCH_RESULTS/master-ls-$store.json"
done
