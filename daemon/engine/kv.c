/* kv.c - KV-cache page accounting (see kv.h): a LIFO free list of page ids. */
#include "kv.h"

#include <errno.h>
#include <stdlib.h>

struct m40_kv_pages {
        uint32_t n_pages, page_tokens;
        uint32_t n_free;
        uint32_t *free_ids; /* n_free ids, top of stack last */
};

int m40_kv_pages_new(uint32_t n_pages, uint32_t page_tokens, struct m40_kv_pages **ret)
{
        struct m40_kv_pages *p;

        if (!n_pages || !page_tokens)
                return -EINVAL;
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->free_ids = malloc((size_t)n_pages * sizeof(uint32_t));
        if (!p->free_ids) {
                free(p);
                return -ENOMEM;
        }
        p->n_pages = n_pages;
        p->page_tokens = page_tokens;
        p->n_free = n_pages;
        for (uint32_t i = 0; i < n_pages; i++)
                p->free_ids[i] = n_pages - 1 - i; /* page 0 is handed out first */
        *ret = p;
        return 0;
}

struct m40_kv_pages *m40_kv_pages_free(struct m40_kv_pages *p)
{
        if (p) {
                free(p->free_ids);
                free(p);
        }
        return NULL;
}

uint32_t m40_kv_pages_total(const struct m40_kv_pages *p)
{
        return p->n_pages;
}

uint32_t m40_kv_pages_used(const struct m40_kv_pages *p)
{
        return p->n_pages - p->n_free;
}

uint32_t m40_kv_pages_page_tokens(const struct m40_kv_pages *p)
{
        return p->page_tokens;
}

int m40_kv_table_reserve(struct m40_kv_pages *p, struct m40_kv_table *t, uint32_t n_tokens)
{
        const uint32_t need =
                (uint32_t)(((uint64_t)n_tokens + p->page_tokens - 1) / p->page_tokens);

        if (need <= t->n_pages)
                return 0;
        if (need - t->n_pages > p->n_free)
                return -ENOSPC;
        if (need > t->cap) {
                uint32_t cap = t->cap ? t->cap : 8;
                uint32_t *np;

                while (cap < need)
                        cap *= 2;
                np = realloc(t->pages, (size_t)cap * sizeof(uint32_t));
                if (!np)
                        return -ENOMEM;
                t->pages = np;
                t->cap = cap;
        }
        while (t->n_pages < need)
                t->pages[t->n_pages++] = p->free_ids[--p->n_free];
        return 0;
}

void m40_kv_table_trim(struct m40_kv_pages *p, struct m40_kv_table *t, uint32_t n_tokens)
{
        const uint32_t keep =
                (uint32_t)(((uint64_t)n_tokens + p->page_tokens - 1) / p->page_tokens);

        while (t->n_pages > keep)
                p->free_ids[p->n_free++] = t->pages[--t->n_pages];
}

void m40_kv_table_release(struct m40_kv_pages *p, struct m40_kv_table *t)
{
        m40_kv_table_trim(p, t, 0);
}

void m40_kv_table_done(struct m40_kv_pages *p, struct m40_kv_table *t)
{
        m40_kv_table_release(p, t);
        free(t->pages);
        t->pages = NULL;
        t->cap = 0;
}
