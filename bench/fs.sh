# The filesystem the benchmarks keep their datasets and every system's
# cache on (sourced by bench/lib.sh and bench/run-all.sh).
#
# ext4 without a journal scans past every inode freed in the last minute
# (six while its inode table block is dirty) on each file create
# (recently_deleted in the kernel's find_inode_bit). On such a disk each
# system that caches in files (Cistern, s3fs, rclone, copy-first) pays for
# the caches the previous repeat deleted; the curl limit and local disk
# create nothing. A production cache disk has a journal (ext4) or a log
# (XFS) and pays nothing of the kind. With BENCH_FS=journaled, where the
# build directory sits on ext4 without a journal, the suite works in a
# journaled ext4 of its own: BENCH_FS_IMG (a sparse file of BENCH_FS_GIB
# GiB, default 64) on a loop device with direct I/O (no second page cache),
# mounted at BENCH_FS_MNT, datasets included, so that local disk and the
# caches share one disk. Not the default: the loop device costs writes
# CPU of its own (a full run so had the worker's cold fetch at 0.62 of
# curl against 0.79 without), and on this project's 2-core VM the two
# ways differ less than two runs of either.
#   bench_fs_up     mount it if needed; prints the directory to work in
#                   (nothing when the native filesystem is used)
#   bench_fs_down   unmount it and free its loop device
#   bench_fs_why    why the suite uses it (empty when it does not)
BENCH_FS_MNT=${BENCH_FS_MNT:-$CIS_BUILD/bench-fs}
BENCH_FS_IMG=${BENCH_FS_IMG:-$CIS_BUILD/bench-fs.img}

bench_fs_why() {
	[ "${BENCH_FS:-native}" = journaled ] || return 0
	local dir dev
	dir=$CIS_BUILD
	[ -d "$dir" ] || return 0
	[ "$(findmnt -no FSTYPE -T "$dir" 2>/dev/null)" = ext4 ] || return 0
	dev=$(findmnt -no SOURCE -T "$dir" 2>/dev/null)
	[ "$(cat "/sys/fs/ext4/${dev##*/}/journal_task" 2>/dev/null)" = "<none>" ] || return 0
	echo "$dev, where $dir is, is ext4 without a journal"
}

bench_fs_up() {
	[ -n "$(bench_fs_why)" ] || return 0
	if ! mountpoint -q "$BENCH_FS_MNT"; then
		[ "$(id -u)" = 0 ] || {
			echo "bench: not root: cannot mount $BENCH_FS_MNT for BENCH_FS=journaled" >&2
			return 1
		}
		mkdir -p "$BENCH_FS_MNT"
		if [ ! -f "$BENCH_FS_IMG" ]; then
			truncate -s "${BENCH_FS_GIB:-64}G" "$BENCH_FS_IMG" &&
				mkfs.ext4 -q -F "$BENCH_FS_IMG" || return 1
		fi
		local loop
		loop=$(losetup --direct-io=on -f --show "$BENCH_FS_IMG") || return 1
		mount -o discard "$loop" "$BENCH_FS_MNT" || {
			losetup -d "$loop"
			return 1
		}
	fi
	echo "$BENCH_FS_MNT"
}

bench_fs_down() {
	mountpoint -q "$BENCH_FS_MNT" || return 0
	local loop
	loop=$(findmnt -no SOURCE "$BENCH_FS_MNT")
	umount "$BENCH_FS_MNT" && losetup -d "$loop"
}
