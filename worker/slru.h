/* Segmented LRU: the eviction order of one cache dir.
 *
 * A new block enters the probation segment; a block used again (the
 * caller decides what counts: blockstore.c's WRK_REUSE_MS) moves to the
 * protected segment, which holds at most prot_max bytes (its least recent
 * blocks fall back to the head of probation). Victims come from the tail of
 * probation first, then from protected. One pass over a dataset larger than
 * the cache only churns probation, so the hot set in protected survives.
 * Intrusive nodes, no allocation; the caller locks. */
#ifndef CISTERN_WORKER_SLRU_H
#define CISTERN_WORKER_SLRU_H

#include <stdbool.h>
#include <stdint.h>

typedef struct wrk_lru_node {
	struct wrk_lru_node *prev, *next;
	uint64_t size;
	uint8_t seg; /* WRK_SEG_* */
} wrk_lru_node;

enum { WRK_SEG_NONE, WRK_SEG_PROBATION, WRK_SEG_PROTECTED };

typedef struct wrk_slru {
	wrk_lru_node prob, prot; /* sentinels: next is the most recent */
	uint64_t prob_bytes, prot_bytes, prot_max;
} wrk_slru;

void wrk_slru_init(wrk_slru *s, uint64_t prot_max);
/* A new block (most recent of probation). */
void wrk_slru_insert(wrk_slru *s, wrk_lru_node *n, uint64_t size);
/* Insert as the least recent of probation (loading an old index). */
void wrk_slru_insert_old(wrk_slru *s, wrk_lru_node *n, uint64_t size);
/* An access: promote to (or refresh in) protected. */
void wrk_slru_touch(wrk_slru *s, wrk_lru_node *n);
/* An access that does not count as a re-use (the same pass over the
 * block): the most recent of its own segment. */
void wrk_slru_refresh(wrk_slru *s, wrk_lru_node *n);
void wrk_slru_remove(wrk_slru *s, wrk_lru_node *n);
/* Eviction candidates in order: pass NULL for the first, then the last
 * result. The result may be removed before asking for the next one only if
 * the next was fetched first. NULL at the end. */
wrk_lru_node *wrk_slru_next_victim(const wrk_slru *s, const wrk_lru_node *after);

#endif
