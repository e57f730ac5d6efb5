/* kv.h - the paged KV-cache page manager of the engine core (core.h, which owns the
 * reservation policy), shared by every engine.
 *
 * Owns page accounting only, not storage: a pool of n_pages page ids, each holding
 * page_tokens positions of every layer's K and V (the engine decides where page i lives),
 * and per-sequence block tables mapping position p to page table->pages[p / page_tokens].
 * A sequence holds only the pages its positions fill; m40_kv_table_release() returns them. */
#ifndef M40_ENGINE_KV_H
#define M40_ENGINE_KV_H

#include <stdint.h>

struct m40_kv_pages;

struct m40_kv_table {
        uint32_t *pages;  /* page ids, position order */
        uint32_t n_pages; /* pages held */
        uint32_t cap;     /* allocated entries of pages[] */
};

/* m40_kv_pages_new - a pool of n_pages (>= 1) pages of page_tokens (>= 1) positions.
 * Returns 0 and the pool in *ret, -EINVAL or -ENOMEM. */
int m40_kv_pages_new(uint32_t n_pages, uint32_t page_tokens, struct m40_kv_pages **ret);

/* m40_kv_pages_free - accepts NULL; returns NULL. Tables still holding pages must be
 * released (or simply freed with m40_kv_table_done()) by their owners. */
struct m40_kv_pages *m40_kv_pages_free(struct m40_kv_pages *p);

uint32_t m40_kv_pages_total(const struct m40_kv_pages *p);
uint32_t m40_kv_pages_used(const struct m40_kv_pages *p);
uint32_t m40_kv_pages_page_tokens(const struct m40_kv_pages *p);

/* m40_kv_table_reserve - make t hold pages for positions [0, n_tokens). Returns 0;
 * -ENOSPC when the pool has too few free pages, or -ENOMEM; on failure t is unchanged. */
int m40_kv_table_reserve(struct m40_kv_pages *p, struct m40_kv_table *t, uint32_t n_tokens);

/* m40_kv_table_trim - return the pages of t past those positions [0, n_tokens) need to
 * p, keeping the rest in order; nothing when t holds no more. */
void m40_kv_table_trim(struct m40_kv_pages *p, struct m40_kv_table *t, uint32_t n_tokens);

/* m40_kv_table_release - return every page of t to p; t stays usable (empty). */
void m40_kv_table_release(struct m40_kv_pages *p, struct m40_kv_table *t);

/* m40_kv_table_done - release t's pages and free its array. */
void m40_kv_table_done(struct m40_kv_pages *p, struct m40_kv_table *t);

#endif
