/* FUSE passthrough (Linux 6.9 and later): the kernel reads an open file
 * straight from a backing file the daemon registered, as if it were a local
 * file, and no read of it reaches the daemon. A file of one block whose
 * block file sits in this host's worker is opened that way: its reads cost
 * what reads of the block file cost, page cache included (one copy, in the
 * block file's own page cache, instead of a second copy in the FUSE file's).
 *
 * libfuse 3.14 (Debian 12) predates passthrough, so the session's device
 * I/O goes through hooks (fuse_session_custom_io) that
 *   - see the kernel's INIT request, and when it offers FUSE_PASSTHROUGH,
 *     add it (with a stacking depth of 1) to libfuse's INIT reply;
 *   - add FOPEN_PASSTHROUGH and the backing id to the OPEN reply the
 *     calling thread marked (fcl_pt_mark_reply).
 * Backing files are registered with the FUSE_DEV_IOC_BACKING_OPEN ioctl,
 * which needs CAP_SYS_ADMIN: without it (or on a kernel without
 * passthrough) every open is a cached one, as before.
 *
 * The kernel's rule: while a node has files open, they all read through the
 * page cache, or all pass through to one and the same backing file; an open
 * that breaks it fails with EIO. So the opens of each node are counted
 * (fcl_inodes_with_io): the first open decides, later ones follow it while
 * any stays open, and the backing file is closed with the last release (the
 * kernel lets go of it before it sends that release). An open that finds
 * the node passing through to a backing file of another version (the
 * object changed while open) still names that backing file, but with
 * FOPEN_DIRECT_IO, which sends its reads to the daemon; so does an O_DIRECT
 * open (the kernel would hand O_DIRECT on to the block file's file system,
 * whose alignment rules a FUSE file does not have), which never starts
 * passing through either. */
#include "client.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cistern/fileio.h"
#include "cistern/log.h"

/* Kernel ABI 7.40 (include/uapi/linux/fuse.h), newer than the headers of
 * Debian 12: the ioctls, the flags, and two fields that older headers call
 * unused[0] (fuse_init_out) and padding (fuse_open_out). */
#define PT_FUSE_PASSTHROUGH  (1ULL << 37)
#define PT_FOPEN_PASSTHROUGH (1u << 7)
#define PT_INIT_STACK_DEPTH  (offsetof(struct fuse_init_out, flags2) + 4)
#define PT_OPEN_BACKING_ID   (offsetof(struct fuse_open_out, open_flags) + 4)
#define PT_MAX_STACK_DEPTH   1 /* block files on a plain file system */
#ifndef FUSE_INIT_EXT
#define FUSE_INIT_EXT (1u << 30)
#endif

struct pt_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define PT_IOC_BACKING_OPEN  _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

_Static_assert(sizeof(struct fuse_open_out) == 16, "fuse_open_out");
_Static_assert(sizeof(struct fuse_in_header) == 40, "fuse_in_header");

/* The backing id the calling thread's next OPEN reply carries; 0: none. */
static _Thread_local int32_t marked;

void fcl_pt_mark_reply(int32_t backing)
{
	marked = backing;
}

static bool pt_on(fcl *c)
{
	return __atomic_load_n(&c->pt.on, __ATOMIC_ACQUIRE);
}

static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata)
{
	fcl *c = userdata;
	ssize_t n = read(fd, buf, len);
	if (__atomic_load_n(&c->pt.init_unique, __ATOMIC_RELAXED) ||
	    n < (ssize_t)(sizeof(struct fuse_in_header) + offsetof(struct fuse_init_in, flags2) +
	                  4))
		return n;
	const struct fuse_in_header *h = buf;
	if (h->opcode != FUSE_INIT)
		return n;
	const struct fuse_init_in *in = (const void *)(h + 1);
	uint64_t offered = in->flags;
	if (offered & FUSE_INIT_EXT)
		offered |= (uint64_t)in->flags2 << 32;
	c->pt.offered = (offered & PT_FUSE_PASSTHROUGH) != 0;
	__atomic_store_n(&c->pt.init_unique, h->unique, __ATOMIC_RELAXED);
	return n;
}

static void patch_init(fcl *c, struct iovec *arg)
{
	struct fuse_init_out *out = arg->iov_base;
	if (c->opts->no_passthrough)
		return;
	if (arg->iov_len < PT_INIT_STACK_DEPTH + 4 || !c->pt.offered ||
	    (out->flags & FUSE_WRITEBACK_CACHE)) {
		cis_info("no passthrough: every read goes through cistern-fuse", "why=\"%s\"",
		         "the kernel does not offer it (Linux 6.9+, CONFIG_FUSE_PASSTHROUGH)");
		return;
	}
	uint32_t depth = PT_MAX_STACK_DEPTH;
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= (uint32_t)(PT_FUSE_PASSTHROUGH >> 32);
	memcpy((char *)out + PT_INIT_STACK_DEPTH, &depth, sizeof(depth));
	__atomic_store_n(&c->pt.on, true, __ATOMIC_RELEASE);
	cis_info("passthrough on: the kernel reads small files of this host's worker itself",
	         "max_stack_depth=%d", PT_MAX_STACK_DEPTH);
}

static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	fcl *c = userdata;
	if (count >= 2 && iov[0].iov_len == sizeof(struct fuse_out_header)) {
		const struct fuse_out_header *oh = iov[0].iov_base;
		if (oh->error == 0 && oh->unique != 0 && marked > 0 &&
		    iov[1].iov_len == sizeof(struct fuse_open_out)) {
			struct fuse_open_out *out = iov[1].iov_base;
			out->open_flags |= PT_FOPEN_PASSTHROUGH;
			memcpy((char *)out + PT_OPEN_BACKING_ID, &marked, sizeof(marked));
		} else if (oh->error == 0 && oh->unique != 0 && !pt_on(c) &&
		           oh->unique == __atomic_load_n(&c->pt.init_unique, __ATOMIC_RELAXED)) {
			patch_init(c, &iov[1]);
		}
	}
	return writev(fd, iov, count);
}

int fcl_pt_attach(fcl *c, struct fuse_session *se)
{
	static const struct fuse_custom_io io = {.read = hook_read, .writev = hook_writev};
	c->pt.devfd = fuse_session_fd(se);
	return fuse_session_custom_io(se, &io, c->pt.devfd);
}

/* The open being decided and what it gets. */
typedef struct pt_open {
	fcl *c;
	uint64_t vhash;
	int fd; /* the block file, or -1 */
	bool o_direct;
	int32_t backing;
	bool direct;
} pt_open;

/* Register fd as a backing file: its id, or 0 (logged; EPERM or a kernel
 * without passthrough turns it off for good). */
static int32_t backing_open(fcl *c, int fd)
{
	struct pt_backing_map map = {.fd = fd};
	int id = ioctl(c->pt.devfd, PT_IOC_BACKING_OPEN, &map);
	if (id > 0)
		return id;
	int err = errno;
	if (err == EPERM || err == ENOTTY || err == EOPNOTSUPP) {
		__atomic_store_n(&c->pt.refused, true, __ATOMIC_RELAXED);
		cis_log_limited(CIS_LOG_INFO, "passthrough-off", 3600,
		                "passthrough unavailable: reads go through the page cache",
		                "err=\"%s\"", cis_strerror(-err));
	} else {
		cis_log_limited(CIS_LOG_WARN, "passthrough-open", 60,
		                "cannot register a block file for passthrough", "err=\"%s\"",
		                cis_strerror(-err));
	}
	return 0;
}

static void decide(fcl_io *io, void *arg)
{
	pt_open *po = arg;
	if (io->opens > 0) {
		po->backing = io->backing;
		po->direct = io->backing && (io->vhash != po->vhash || po->o_direct);
	} else if (po->fd >= 0 && !__atomic_load_n(&po->c->pt.refused, __ATOMIC_RELAXED)) {
		io->backing = backing_open(po->c, po->fd);
		io->vhash = po->vhash;
		po->backing = io->backing;
	}
	io->opens++;
}

int32_t fcl_pt_open(fcl *c, uint64_t ino, uint64_t vhash, uint64_t size, int fd, bool o_direct,
                    bool *direct, bool *counted)
{
	struct stat st;
	bool on = pt_on(c);
	/* A block file cut short behind the worker's back would read short,
	 * and one on a failing disk would fail the application's reads with
	 * EIO: such a file is read through the daemon, which asks the worker
	 * (it drops the file and fetches the block again). What is not in
	 * the page cache is read here to know; the kernel then finds it
	 * cached. */
	bool whole =
	    on && fd >= 0 && !o_direct && fstat(fd, &st) == 0 && (uint64_t)st.st_size == size;
	int unreadable = whole ? cis_file_range_readable(fd, 0, size) : 0;
	if (unreadable) {
		whole = false;
		cis_log_limited(CIS_LOG_WARN, "passthrough-unreadable", 10,
		                "block file unreadable, reading through the daemon",
		                "ino=%llu err=\"%s\"", (unsigned long long)ino,
		                cis_strerror(unreadable));
	}
	pt_open po = {.c = c, .vhash = vhash, .fd = whole ? fd : -1, .o_direct = o_direct};
	*direct = false;
	*counted = on && fcl_inodes_with_io(c->inodes, ino, decide, &po) == 0;
	if (*counted) {
		*direct = po.direct;
		if (po.backing && !po.direct)
			cis_counter_inc(c->stats.passthrough_opens);
	}
	if (fd >= 0)
		close(fd);
	return po.backing;
}

static void release(fcl_io *io, void *arg)
{
	fcl *c = arg;
	if (io->opens == 0 || --io->opens > 0 || io->backing == 0)
		return;
	uint32_t id = (uint32_t)io->backing;
	if (ioctl(c->pt.devfd, PT_IOC_BACKING_CLOSE, &id) != 0)
		cis_log_limited(CIS_LOG_WARN, "passthrough-close", 60,
		                "cannot close a passthrough backing file", "err=\"%s\"",
		                cis_strerror(-errno));
	io->backing = 0;
}

void fcl_pt_release(fcl *c, uint64_t ino)
{
	if (pt_on(c))
		(void)fcl_inodes_with_io(c->inodes, ino, release, c);
}
