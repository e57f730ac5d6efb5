/* heap.c - the out-of-line parts of the tokenizers' merge-candidate queue (see heap.h): its
 * storage, grown by doubling. */
#include "text/heap.h"

#include <errno.h>
#include <stdlib.h>

int m40_bigram_heap_grow(struct m40_bigram_heap *h)
{
        size_t cap = h->cap ? h->cap * 2 : 256;
        struct m40_bigram *p = realloc(h->v, cap * sizeof(*p));

        if (!p)
                return -ENOMEM;
        h->v = p;
        h->cap = cap;
        return 0;
}

void m40_bigram_heap_done(struct m40_bigram_heap *h)
{
        free(h->v);
        *h = (struct m40_bigram_heap){0};
}
