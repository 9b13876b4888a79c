#!/usr/bin/env bash
# `make run`: the single-node stack in the foreground. Mounts the demo
# dataset (generated once by scripts/make-demo-dataset.sh) or the store given
# as $1 (make run UFS=s3://bucket/prefix; credentials, region and endpoint
# from the usual AWS_* variables or ~/.aws/credentials) at CISTERN_MNT
# (default /tmp/cistern-mnt) with `cistern local -f`. Ctrl-C unmounts and
# stops everything.
# Environment: BUILD (build dir, default build), CISTERN_MNT, CISTERN_DEMO_DIR,
# CISTERN_LOCAL_ARGS (more flags for cistern local, e.g. --cache-dir /nvme:100G).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build="$top/$build" ;; esac
cistern="$build/cli/cistern"
mnt=${CISTERN_MNT:-/tmp/cistern-mnt}
ufs=${1:-}

if [ ! -x "$cistern" ]; then
	echo "run-local: $cistern not found (run make build first)" >&2
	exit 1
fi
if [ -z "$ufs" ]; then
	demo=$("$top/scripts/make-demo-dataset.sh" "${CISTERN_DEMO_DIR:-}")
	ufs="file://$demo"
fi
case $ufs in
s3://* | file://*) ;;
/*) ufs="file://$ufs" ;;
*)
	echo "run-local: UFS=$ufs: expected s3://bucket/prefix, file:///dir or /dir" >&2
	exit 1
	;;
esac

# The help text comes once the stack says it is ready (its ready line names
# the admin API's address, which depends on the ports that were free).
# cistern local takes this shell's place (exec), so that Ctrl-C, and the
# SIGTERM that make passes on to its recipe when it is killed, reach it: it
# unmounts and stops its daemons. A shell left waiting for it would die of
# the SIGTERM alone and leave the stack running, mounted, with no one to
# stop it.
# shellcheck disable=SC2086
exec "$cistern" local "$ufs" "$mnt" -f ${CISTERN_LOCAL_ARGS:-} > >(while IFS= read -r line; do
	echo "$line"
	case $line in
	"cistern local: ready:"*)
		api=$(sed -n 's/.*(api \([^,]*\),.*/\1/p' <<<"$line")
		cat <<HELP

  $ufs is mounted at $mnt (read-only; blocks are cached as they are read).

  Read it like any folder:
      ls $mnt
      ls $mnt/train | head; du -sh $mnt/shards
      python3 -c 'import os; p="$mnt/train"; print(sum(len(f) for _,_,f in os.walk(p)), "files")'
      python3 -c 'import glob; print(sum(len(open(f,"rb").read()) for f in glob.glob("$mnt/train/*/*")) >> 20, "MiB read")'

  Preload everything, then see what the cache holds:
      $cistern --api $api load /
      $cistern --api $api report

  In a PyTorch job: torchvision.datasets.ImageFolder("$mnt/train")

  Ctrl-C here unmounts $mnt and stops the stack.
HELP
		;;
	esac
done)
