/* Segmented LRU; see slru.h. */
#include "slru.h"

#include <stddef.h>

static void list_init(wrk_lru_node *head)
{
	head->prev = head->next = head;
}

static void list_unlink(wrk_lru_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

/* After head: the most recent end. */
static void list_push_front(wrk_lru_node *head, wrk_lru_node *n)
{
	n->next = head->next;
	n->prev = head;
	head->next->prev = n;
	head->next = n;
}

static void list_push_back(wrk_lru_node *head, wrk_lru_node *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

void wrk_slru_init(wrk_slru *s, uint64_t prot_max)
{
	list_init(&s->prob);
	list_init(&s->prot);
	s->prob_bytes = s->prot_bytes = 0;
	s->prot_max = prot_max;
}

void wrk_slru_insert(wrk_slru *s, wrk_lru_node *n, uint64_t size)
{
	n->size = size;
	n->seg = WRK_SEG_PROBATION;
	list_push_front(&s->prob, n);
	s->prob_bytes += size;
}

void wrk_slru_insert_old(wrk_slru *s, wrk_lru_node *n, uint64_t size)
{
	n->size = size;
	n->seg = WRK_SEG_PROBATION;
	list_push_back(&s->prob, n);
	s->prob_bytes += size;
}

void wrk_slru_remove(wrk_slru *s, wrk_lru_node *n)
{
	if (n->seg == WRK_SEG_PROBATION)
		s->prob_bytes -= n->size;
	else if (n->seg == WRK_SEG_PROTECTED)
		s->prot_bytes -= n->size;
	else
		return;
	list_unlink(n);
	n->seg = WRK_SEG_NONE;
}

void wrk_slru_touch(wrk_slru *s, wrk_lru_node *n)
{
	if (n->seg == WRK_SEG_NONE)
		return;
	wrk_slru_remove(s, n);
	n->seg = WRK_SEG_PROTECTED;
	list_push_front(&s->prot, n);
	s->prot_bytes += n->size;
	/* Overflow of protected goes back to probation as its most recent, so
	 * it gets another chance before it is evicted. Keep n itself. */
	while (s->prot_bytes > s->prot_max && s->prot.prev != n) {
		wrk_lru_node *old = s->prot.prev;

		wrk_slru_remove(s, old);
		wrk_slru_insert(s, old, old->size);
	}
}

void wrk_slru_refresh(wrk_slru *s, wrk_lru_node *n)
{
	if (n->seg == WRK_SEG_NONE)
		return;
	list_unlink(n);
	list_push_front(n->seg == WRK_SEG_PROBATION ? &s->prob : &s->prot, n);
}

wrk_lru_node *wrk_slru_next_victim(const wrk_slru *s, const wrk_lru_node *after)
{
	const wrk_lru_node *n;

	if (!after)
		n = s->prob.prev;
	else
		n = after->prev;
	if (n == &s->prob)
		n = s->prot.prev;
	if (n == &s->prot)
		return NULL;
	return (wrk_lru_node *)n;
}
