/* "Preload ahead of readers" across the files of a directory. A data loader
 * walking a file list opens the files of a directory in listing order, a
 * few threads taking them in turn; each small file is one block, so the
 * per-file readahead never starts. This detector remembers the listings
 * the client served (up to DA_DIRS directories and DA_MAX_TOTAL files, the
 * least recently used dropped first; files only, in order)
 * and, once a directory's files are opened in order, names the files after
 * the one just opened, in a window that doubles from DA_FIRST_WINDOW to
 * DA_MAX_WINDOW files, for the caller to prefetch. An open out of order
 * (a shuffled reader) resets it, so random access triggers nothing.
 *
 * A loader walking a whole tree goes from one directory to the next in its
 * parent's listing order; a window that runs past the end of a directory
 * goes on into the next subdirectories of the parent (as far as their
 * listings are held), which then start with the window already open. With
 * many small directories the window would otherwise shut at every end.
 *
 * Files are found by inode in a direct-mapped table: a collision
 * overwrites, which at worst misses a prefetch, and keeps the memory fixed. */
#include "fcl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DA_DIRS         4096
#define DA_MAX_TOTAL    (1u << 18) /* files in all (16 bytes each) */
#define DA_MAP_BITS     19
#define DA_FIRST_WINDOW 8
/* Opens this far from where the last one ended still count as in order:
 * readers taking files in turn reach the daemon slightly reordered. */
#define DA_SLACK    16
#define DA_SIB_BITS 16 /* directory table: inode -> next sibling, own slot */
#define DA_MAX_HOPS 8  /* directories one window may run into */

typedef struct da_dir {
	uint64_t dino; /* 0: slot free */
	uint32_t gen;  /* bumped when the slot takes another listing */
	fcl_da_file *files;
	size_t n;
	uint64_t used; /* LRU stamp */
	size_t next;   /* index after the furthest open in order */
	unsigned seq;  /* opens in order in a row */
	size_t window;
	size_t issued_to; /* files before this index were named already */
} da_dir;

/* What is known of a directory inode: the directory after it in its
 * parent's listing (0: none known) and the slot holding its own listing
 * (valid while that slot's gen is unchanged). */
typedef struct da_sib {
	uint64_t dino, next;
	uint32_t slot, gen;
	bool held;
} da_sib;

typedef struct da_slot {
	uint64_t ino;
	uint32_t dir; /* index in dirs */
	uint32_t gen; /* that slot's gen when this was written */
	uint32_t idx;
} da_slot;

struct fcl_dirahead {
	pthread_mutex_t lock;
	da_dir *dirs; /* DA_DIRS */
	size_t total; /* files held in all */
	da_slot *map; /* 1 << DA_MAP_BITS */
	da_sib *sib;  /* 1 << DA_SIB_BITS, direct-mapped like map */
	uint64_t clock;
};

static size_t map_index(uint64_t ino)
{
	return fcl_ino_slot(ino, DA_MAP_BITS);
}

int fcl_da_new(fcl_dirahead **out)
{
	fcl_dirahead *da = calloc(1, sizeof(*da));
	if (!da)
		return -ENOMEM;
	da->map = calloc((size_t)1 << DA_MAP_BITS, sizeof(*da->map));
	da->dirs = calloc(DA_DIRS, sizeof(*da->dirs));
	da->sib = calloc((size_t)1 << DA_SIB_BITS, sizeof(*da->sib));
	if (!da->map || !da->dirs || !da->sib) {
		free(da->map);
		free(da->dirs);
		free(da->sib);
		free(da);
		return -ENOMEM;
	}
	pthread_mutex_init(&da->lock, NULL);
	*out = da;
	return 0;
}

void fcl_da_free(fcl_dirahead *da)
{
	if (!da)
		return;
	for (int i = 0; i < DA_DIRS; i++)
		free(da->dirs[i].files);
	free(da->dirs);
	free(da->map);
	free(da->sib);
	pthread_mutex_destroy(&da->lock);
	free(da);
}

/* Empty slot d (its map entries die with the generation). Under lock. */
static void dir_drop(fcl_dirahead *da, da_dir *d)
{
	da->total -= d->n;
	free(d->files);
	*d = (da_dir){.gen = d->gen + 1};
}

/* The least recently used slot holding a listing; NULL if none. */
static da_dir *dir_oldest(fcl_dirahead *da)
{
	da_dir *old = NULL;
	for (int i = 0; i < DA_DIRS; i++)
		if (da->dirs[i].dino && (!old || da->dirs[i].used < old->used))
			old = &da->dirs[i];
	return old;
}

/* dino's entry in the directory table, taken over (emptied) if it held
 * another directory. Under lock. */
static da_sib *sib_of(fcl_dirahead *da, uint64_t dino)
{
	da_sib *e = &da->sib[fcl_ino_slot(dino, DA_SIB_BITS)];

	if (e->dino != dino)
		*e = (da_sib){.dino = dino};
	return e;
}

void fcl_da_listed(fcl_dirahead *da, uint64_t dino, const fcl_da_file *files, size_t n,
                   const uint64_t *subdirs, size_t nsub)
{
	if (n > DA_MAX_TOTAL / 4)
		n = DA_MAX_TOTAL / 4; /* the rest of a huge directory is not tracked */
	fcl_da_file *copy = malloc((n ? n : 1) * sizeof(*copy));
	if (!copy)
		return; /* no prefetch for this directory: nothing else is lost */
	if (n)
		memcpy(copy, files, n * sizeof(*copy));
	pthread_mutex_lock(&da->lock);
	da_dir *d = NULL;
	for (int i = 0; i < DA_DIRS && !d; i++)
		if (da->dirs[i].dino == dino)
			d = &da->dirs[i];
	if (d)
		dir_drop(da, d);
	while (da->total + n > DA_MAX_TOTAL)
		dir_drop(da, dir_oldest(da));
	for (int i = 0; i < DA_DIRS && !d; i++)
		if (da->dirs[i].dino == 0)
			d = &da->dirs[i];
	if (!d) {
		d = dir_oldest(da);
		dir_drop(da, d);
	}
	*d = (da_dir){.dino = dino, .gen = d->gen, .files = copy, .n = n, .used = ++da->clock};
	da->total += n;
	uint32_t slot = (uint32_t)(d - da->dirs);
	for (size_t i = 0; i < n; i++)
		da->map[map_index(copy[i].ino)] = (da_slot){copy[i].ino, slot, d->gen, (uint32_t)i};
	sib_of(da, dino)->held = true;
	sib_of(da, dino)->slot = slot;
	sib_of(da, dino)->gen = d->gen;
	for (size_t i = 0; i + 1 < nsub; i++)
		sib_of(da, subdirs[i])->next = subdirs[i + 1];
	pthread_mutex_unlock(&da->lock);
}

/* The held listing of the directory after d in its parent's listing;
 * NULL if unknown or not held. Under lock. */
static da_dir *next_sibling(fcl_dirahead *da, const da_dir *d)
{
	da_sib s = da->sib[fcl_ino_slot(d->dino, DA_SIB_BITS)];

	if (s.dino != d->dino || !s.next)
		return NULL;
	uint64_t next = s.next;

	s = da->sib[fcl_ino_slot(next, DA_SIB_BITS)];
	if (s.dino != next || !s.held || da->dirs[s.slot].gen != s.gen ||
	    da->dirs[s.slot].dino != next)
		return NULL; /* not listed here, or its slot took another listing */
	return &da->dirs[s.slot];
}

/* Name files of d from issued_to on, up to index to, at most max - *k of
 * them, into next. Under lock. */
static void name_files(da_dir *d, size_t from, size_t to, uint64_t max_size, uint64_t *next,
                       size_t *k, size_t max)
{
	for (size_t j = from; j < to && *k < max; j++)
		if (d->files[j].size > 0 && d->files[j].size <= max_size)
			next[(*k)++] = d->files[j].ino;
	if (to > d->issued_to)
		d->issued_to = to;
}

size_t fcl_da_opened(fcl_dirahead *da, uint64_t ino, uint64_t max_size, uint64_t *next, size_t max)
{
	size_t k = 0;
	pthread_mutex_lock(&da->lock);
	da_slot s = da->map[map_index(ino)];
	da_dir *d = &da->dirs[s.dir < DA_DIRS ? s.dir : 0];
	if (!ino || s.ino != ino || s.dir >= DA_DIRS || d->gen != s.gen || !d->dino ||
	    s.idx >= d->n || d->files[s.idx].ino != ino)
		goto out;
	d->used = ++da->clock;
	size_t i = s.idx;
	if (i + DA_SLACK < d->next || i > d->next + DA_SLACK) {
		d->seq = 0;
		d->window = 0;
		d->issued_to = i + 1;
		d->next = i + 1;
		goto out;
	}
	if (i + 1 > d->next)
		d->next = i + 1;
	if (++d->seq < 2)
		goto out;
	d->window = d->window ? d->window * 2 : DA_FIRST_WINDOW;
	if (d->window > DA_MAX_WINDOW)
		d->window = DA_MAX_WINDOW;
	size_t from = d->issued_to > i + 1 ? d->issued_to : i + 1;
	size_t to = i + 1 + d->window < d->n ? i + 1 + d->window : d->n;
	size_t left = i + 1 + d->window - to; /* past the end of d */

	name_files(d, from, to, max_size, next, &k, max);
	/* On into the next directories, which start with the window open:
	 * their first opens in order go on from what was named here. */
	da_dir *cur = d;
	for (int hop = 0; hop < DA_MAX_HOPS && left && k < max; hop++) {
		da_dir *nd = next_sibling(da, cur);

		if (!nd || nd == d)
			break;
		if (nd->seq < 2) {
			nd->seq = 2;
			nd->window = d->window;
			nd->next = 0;
		}
		size_t nto = left < nd->n ? left : nd->n;
		name_files(nd, nd->issued_to, nto, max_size, next, &k, max);
		left -= nto;
		cur = nd;
	}
out:
	pthread_mutex_unlock(&da->lock);
	return k;
}
