/* model.c - loading a llama/qwen2 GGUF for the CPU engine (see model.h). */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "m40/error.h"
#include "model/ggml_type.h"
#include "model/model_info.h"
#include "quant.h"

#define MAX_ROT 512 /* m40_cpu_rope() keeps a cos/sin cache of this many dimensions */

static int fail(char *err, size_t errlen, int code, const char *path, const char *what,
                const char *name)
{
        if (err)
                snprintf(err, errlen, "%s: %s%s%s", path, what, name ? " " : "", name ? name : "");
        return code;
}

/* find - tensor name with ne == (ne0, ne1); ne1 == 0 means a 1-D tensor. */
static int find(struct m40_model *m, const char *name, uint64_t ne0, uint64_t ne1,
                const struct m40_gguf_tensor **ret, char *err, size_t errlen)
{
        const char *path = m40_gguf_path(m->gguf);
        const struct m40_gguf_tensor *t = m40_gguf_tensor_find(m->gguf, name);
        char msg[160];

        if (!t)
                return fail(err, errlen, M40_EFORMAT, path, "missing tensor", name);
        if (t->ne[0] != ne0 || t->ne[1] != (ne1 ? ne1 : 1) || t->ne[2] != 1 || t->ne[3] != 1) {
                snprintf(msg, sizeof(msg),
                         "tensor has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]:",
                         (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                         (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                         (unsigned long long)ne0, (unsigned long long)(ne1 ? ne1 : 1));
                return fail(err, errlen, M40_EFORMAT, path, msg, name);
        }
        *ret = t;
        return 0;
}

static int get_weight(struct m40_model *m, const char *name, uint32_t n_in, uint32_t n_out,
                      struct m40_weight *w, char *err, size_t errlen)
{
        const struct m40_gguf_tensor *t;
        uint64_t rb;
        int e = find(m, name, n_in, n_out, &t, err, errlen);

        if (e)
                return e;
        if (m40_ggml_row_size(t->type, n_in, &rb))
                return fail(err, errlen, M40_EUNSUPPORTED, m40_gguf_path(m->gguf),
                            "unsupported type or row length in tensor", name);
        w->data = (const uint8_t *)m->map + t->file_offset;
        w->type = t->type;
        w->n_in = n_in;
        w->n_out = n_out;
        w->row_bytes = rb;
        return 0;
}

/* get_vec - a 1-D tensor of n elements, any type, as a new float array in *ret. */
static int get_vec(struct m40_model *m, const char *name, uint32_t n, bool required, float **ret,
                   char *err, size_t errlen)
{
        const struct m40_gguf_tensor *t;
        const struct m40_ggml_type_info *ti;
        float *v;
        int e;

        *ret = NULL;
        if (!required && !m40_gguf_tensor_find(m->gguf, name))
                return 0;
        e = find(m, name, n, 0, &t, err, errlen);
        if (e)
                return e;
        ti = m40_ggml_type_info(t->type);
        if (!ti || n % ti->block_size)
                return fail(err, errlen, M40_EUNSUPPORTED, m40_gguf_path(m->gguf),
                            "unsupported type in tensor", name);
        v = malloc((size_t)n * sizeof(float));
        if (!v)
                return -ENOMEM;
        m40_cpu_dequant(t->type, (const uint8_t *)m->map + t->file_offset, v, n / ti->block_size);
        *ret = v;
        return 0;
}

static int32_t token_id(const struct m40_gguf *g, const char *key)
{
        uint32_t v;

        if (!m40_gguf_find(g, key) || m40_gguf_get_u32(g, key, 0, &v) || v > INT32_MAX)
                return -1;
        return (int32_t)v;
}

static int load_hparams(struct m40_model *m, char *err, size_t errlen)
{
        struct m40_model_info info;
        const char *path = m40_gguf_path(m->gguf);
        int e = m40_model_info_init(&info, m->gguf, err, errlen);

        if (e)
                return e;
        if (strcmp(info.arch, "llama") == 0)
                m->arch = M40_ARCH_LLAMA;
        else if (strcmp(info.arch, "qwen2") == 0)
                m->arch = M40_ARCH_QWEN2;
        else
                return fail(err, errlen, M40_EUNSUPPORTED, path,
                            "unsupported architecture (the CPU engine runs llama and qwen2):",
                            info.arch);
        m->n_layers = info.n_layers;
        m->dim = info.n_embd;
        m->n_heads = info.n_heads;
        m->n_kv_heads = info.n_kv_heads;
        m->head_dim = info.head_dim;
        m->n_ff = info.n_ff;
        m->n_ctx_train = info.context_length;
        m->n_vocab = (uint32_t)info.vocab_size;
        m->rms_eps = info.rms_eps > 0.0f ? info.rms_eps : 1e-5f;
        m->weight_bytes = info.weight_bytes;
        if (!m->n_layers || !m->dim || !m->n_heads || !m->n_kv_heads || !m->head_dim || !m->n_ff ||
            m->n_heads % m->n_kv_heads || info.vocab_size == 0 || info.vocab_size > INT32_MAX)
                return fail(err, errlen, M40_EFORMAT, path,
                            "missing or inconsistent hyperparameters", NULL);
        m->q_dim = m->n_heads * m->head_dim;
        m->kv_dim = m->n_kv_heads * m->head_dim;
        m->rope.n_rot = info.rope_dims;
        m->rope.freq_base = info.rope_freq_base;
        m->rope.freq_scale = 1.0f;
        m->rope.neox = m->arch == M40_ARCH_QWEN2;
        if (m->rope.n_rot == 0 || m->rope.n_rot % 2 || m->rope.n_rot > m->head_dim ||
            m->rope.n_rot > MAX_ROT)
                return fail(err, errlen, M40_EUNSUPPORTED, path, "unsupported rope dimension",
                            NULL);
        if (strcmp(info.rope_scaling, "linear") == 0 && info.rope_scaling_factor > 0.0f)
                m->rope.freq_scale = 1.0f / info.rope_scaling_factor;
        else if (strcmp(info.rope_scaling, "none") != 0 && strcmp(info.rope_scaling, "linear"))
                return fail(err, errlen, M40_EUNSUPPORTED, path, "unsupported rope scaling",
                            info.rope_scaling);
        m->bos_id = token_id(m->gguf, "tokenizer.ggml.bos_token_id");
        m->eos_id = token_id(m->gguf, "tokenizer.ggml.eos_token_id");
        m->eot_id = token_id(m->gguf, "tokenizer.ggml.eot_token_id");
        return 0;
}

static int load_layer(struct m40_model *m, uint32_t i, char *err, size_t errlen)
{
        struct m40_layer *l = &m->layers[i];
        const bool qwen = m->arch == M40_ARCH_QWEN2;
        char n[64];
        int e = 0;

#define NAME(s) (snprintf(n, sizeof(n), "blk.%u.%s", i, s), n)
        e = e ? e : get_vec(m, NAME("attn_norm.weight"), m->dim, true, &l->attn_norm, err, errlen);
        e = e ? e : get_weight(m, NAME("attn_q.weight"), m->dim, m->q_dim, &l->wq, err, errlen);
        e = e ? e : get_weight(m, NAME("attn_k.weight"), m->dim, m->kv_dim, &l->wk, err, errlen);
        e = e ? e : get_weight(m, NAME("attn_v.weight"), m->dim, m->kv_dim, &l->wv, err, errlen);
        e = e ? e
              : get_weight(m, NAME("attn_output.weight"), m->q_dim, m->dim, &l->wo, err, errlen);
        e = e ? e : get_vec(m, NAME("attn_q.bias"), m->q_dim, qwen, &l->bq, err, errlen);
        e = e ? e : get_vec(m, NAME("attn_k.bias"), m->kv_dim, qwen, &l->bk, err, errlen);
        e = e ? e : get_vec(m, NAME("attn_v.bias"), m->kv_dim, qwen, &l->bv, err, errlen);
        e = e ? e : get_vec(m, NAME("ffn_norm.weight"), m->dim, true, &l->ffn_norm, err, errlen);
        e = e ? e
              : get_weight(m, NAME("ffn_gate.weight"), m->dim, m->n_ff, &l->w_gate, err, errlen);
        e = e ? e : get_weight(m, NAME("ffn_up.weight"), m->dim, m->n_ff, &l->w_up, err, errlen);
        e = e ? e
              : get_weight(m, NAME("ffn_down.weight"), m->n_ff, m->dim, &l->w_down, err, errlen);
#undef NAME
        return e;
}

/* read_in - reads the mapping in, in chunks, calling progress after each (the CPU engine's
 * load progress; MAP_POPULATE would read it all in one silent call). */
static void read_in(struct m40_model *m, const struct m40_model_progress *pr)
{
        const size_t chunk = 64u << 20;
        const long pg = sysconf(_SC_PAGESIZE);
        struct timespec t0, t;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (size_t off = 0; off < m->map_size;) {
                size_t n = m->map_size - off < chunk ? m->map_size - off : chunk;
                uint8_t *p = (uint8_t *)m->map + off;
                bool done = false;

#ifdef MADV_POPULATE_READ
                done = madvise(p, n, MADV_POPULATE_READ) == 0;
#endif
                for (size_t i = 0; !done && i < n; i += (size_t)(pg > 0 ? pg : 4096))
                        (void)*(volatile const uint8_t *)(p + i);
                off += n;
                clock_gettime(CLOCK_MONOTONIC, &t);
                if (pr && pr->fn)
                        pr->fn(pr->ctx, off, m->map_size,
                               (double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9);
        }
}

/* map_file - maps the file g was parsed from, through its open descriptor: the bytes
 * validated are the bytes mapped, and the path is not opened again. */
static int map_file(struct m40_model *m, bool populate, const struct m40_model_progress *pr,
                    char *err, size_t errlen)
{
        const char *path = m40_gguf_path(m->gguf);
        int fd = m40_gguf_fd(m->gguf);

        if (fd < 0)
                return fail(err, errlen, -EBADF, path, "not read from a file", NULL);
        m->map_size = m40_gguf_file_size(m->gguf);
        m->map = mmap(NULL, m->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->map == MAP_FAILED) {
                int e = -errno;

                m->map = NULL;
                return fail(err, errlen, e, path, strerror(-e), NULL);
        }
        if (populate)
                read_in(m, pr);
        return 0;
}

static int load(struct m40_gguf *g, bool populate, const struct m40_model_progress *pr,
                struct m40_model **ret, char *err, size_t errlen)
{
        struct m40_model *m;
        int e;

        if (!g)
                return -EINVAL;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->gguf = g;
        e = load_hparams(m, err, errlen);
        if (e)
                goto out_free;
        e = map_file(m, populate, pr, err, errlen);
        if (e)
                goto out_free;
        e = get_weight(m, "token_embd.weight", m->dim, m->n_vocab, &m->tok_embd, err, errlen);
        if (e)
                goto out_free;
        if (m40_gguf_tensor_find(m->gguf, "output.weight"))
                e = get_weight(m, "output.weight", m->dim, m->n_vocab, &m->output, err, errlen);
        else
                m->output = m->tok_embd;
        e = e ? e : get_vec(m, "output_norm.weight", m->dim, true, &m->output_norm, err, errlen);
        e = e ? e
              : get_vec(m, "rope_freqs.weight", m->rope.n_rot / 2, false, &m->rope_freqs, err,
                        errlen);
        if (e)
                goto out_free;
        m->rope.freq_factors = m->rope_freqs;
        m->layers = calloc(m->n_layers, sizeof(*m->layers));
        if (!m->layers) {
                e = -ENOMEM;
                goto out_free;
        }
        for (uint32_t i = 0; i < m->n_layers && !e; i++)
                e = load_layer(m, i, err, errlen);
        if (e)
                goto out_free;
        *ret = m;
        return 0;
out_free:
        m40_model_free(m);
        return e;
}

int m40_model_load(struct m40_gguf *g, const struct m40_model_progress *pr, struct m40_model **ret,
                   char *err, size_t errlen)
{
        return load(g, true, pr, ret, err, errlen);
}

int m40_model_open(struct m40_gguf *g, struct m40_model **ret, char *err, size_t errlen)
{
        return load(g, false, NULL, ret, err, errlen);
}

struct m40_model *m40_model_free(struct m40_model *m)
{
        if (!m)
                return NULL;
        if (m->layers) {
                for (uint32_t i = 0; i < m->n_layers; i++) {
                        struct m40_layer *l = &m->layers[i];

                        free(l->attn_norm);
                        free(l->ffn_norm);
                        free(l->bq);
                        free(l->bk);
                        free(l->bv);
                }
                free(m->layers);
        }
        free(m->output_norm);
        free(m->rope_freqs);
        if (m->map)
                munmap(m->map, m->map_size);
        free(m);
        return NULL;
}

void m40_model_embed(const struct m40_model *m, int32_t token, float *out)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(m->tok_embd.type);
        const uint8_t *row =
                (const uint8_t *)m->tok_embd.data + (size_t)token * m->tok_embd.row_bytes;

        m40_cpu_dequant(m->tok_embd.type, row, out, m->dim / ti->block_size);
}
