/* Which version of each file the node's page cache holds.
 *
 * An open keeps the kernel's pages (keep_cache) only while they are of the
 * version it opened, and a handle still open on an older version must not
 * read into a cache a newer open has dropped (its bytes would mix with the
 * newer ones). Each node's version carries the order of the master answer
 * it came from: an answer that arrives after a newer one (an open that
 * raced another across a change in the store) neither replaces the newer
 * version nor lets the newer handle's reads fail as if theirs were old.
 *
 * The version lives in the node's state (fcl_io, inode.c), which lasts as
 * long as the kernel holds the node: as long as the node has pages, and
 * always while a file of it is open. So no bound can push it out from
 * under two open handles of different versions.
 *
 * The open that moves a node to another version answers without
 * keep_cache, and the kernel drops the pages when the opening process takes
 * that answer in, some time after the daemon wrote it. Another open of the
 * new version answered meanwhile with keep_cache, and taken in first, would
 * read the old version's pages; so for FCL_SWITCH_GRACE_MS after a switch,
 * no open keeps them. */
#include "fcl.h"

#include "cistern/time.h"

#define FCL_SWITCH_GRACE_MS 1000

typedef struct opened_arg {
	uint64_t vhash, answered;
	bool versioned;
	bool keep;
} opened_arg;

static void do_opened(fcl_io *io, void *arg)
{
	opened_arg *a = arg;
	bool known = io->page_vhash != 0;
	uint64_t now = cis_mono_ms();
	bool settled = now - io->page_switch_ms >= FCL_SWITCH_GRACE_MS;
	a->keep =
	    a->versioned && known && !io->page_changed && io->page_vhash == a->vhash && settled;
	if (!known || io->page_answered <= a->answered) {
		if (known && (io->page_changed || io->page_vhash != a->vhash))
			io->page_switch_ms = now;
		io->page_vhash = a->vhash;
		io->page_answered = a->answered;
		io->page_changed = false;
	}
}

bool fcl_versions_opened(fcl_inodes *t, uint64_t ino, uint64_t vhash, bool versioned,
                         uint64_t answered)
{
	opened_arg a = {.vhash = vhash, .answered = answered, .versioned = versioned};
	return fcl_inodes_with_io(t, ino, do_opened, &a) == 0 && a.keep;
}

static void do_version(fcl_io *io, void *arg)
{
	*(uint64_t *)arg = io->page_vhash;
}

uint64_t fcl_versions_other(fcl_inodes *t, uint64_t ino, uint64_t vhash)
{
	uint64_t now = 0;
	if (fcl_inodes_with_io(t, ino, do_version, &now) != 0 || now == vhash)
		return 0;
	return now;
}

static void do_changed(fcl_io *io, void *arg)
{
	(void)arg;
	if (io->page_vhash)
		io->page_changed = true;
}

void fcl_versions_changed(fcl_inodes *t, uint64_t ino)
{
	(void)fcl_inodes_with_io(t, ino, do_changed, NULL);
}
