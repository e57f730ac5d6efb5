/* progress.c - a transfer's progress bar or progress lines (progress.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"
#include "store.h"

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void m40_progress_init(struct m40_progress *p, FILE *f, bool tty, const char *label, uint64_t start,
                       uint64_t total)
{
        memset(p, 0, sizeof(*p));
        p->f = f;
        p->tty = tty;
        p->label = label;
        p->start = p->bytes = start;
        p->total = total;
        p->t0 = p->last = now_s();
        p->decile = total ? (int)(start * 10 / total) : 0;
        p->win_t[0] = p->t0;
        p->win_b[0] = start;
        p->win_n = 1;
        p->win_i = 1;
}

void m40_progress_total(struct m40_progress *p, uint64_t total)
{
        p->total = total;
        if (total)
                p->decile = (int)(p->bytes * 10 / total);
}

double m40_progress_rate(const struct m40_progress *p)
{
        int newest = (p->win_i + M40_PROGRESS_WINDOW - 1) % M40_PROGRESS_WINDOW;
        int oldest = p->win_n < M40_PROGRESS_WINDOW ? 0 : p->win_i;
        double dt = p->win_t[newest] - p->win_t[oldest];

        if (p->win_n < 2 || dt <= 0)
                return 0;
        return (double)(p->win_b[newest] - p->win_b[oldest]) / dt;
}

static const char *clock_text(double s, char *buf, size_t len)
{
        if (s >= 360000)
                snprintf(buf, len, ">99h");
        else if (s >= 3600)
                snprintf(buf, len, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
        else
                snprintf(buf, len, "%d:%02d", (int)s / 60, (int)s % 60);
        return buf;
}

/* "ETA M:SS" while running, "in M:SS" once complete */
static const char *eta(const struct m40_progress *p, char *buf, size_t len)
{
        double rate = m40_progress_rate(p);
        char t[32];

        if (p->total && p->bytes >= p->total)
                snprintf(buf, len, "in %s", clock_text(p->last - p->t0, t, sizeof(t)));
        else if (!p->total || rate <= 0)
                snprintf(buf, len, "ETA --:--");
        else
                snprintf(buf, len, "ETA %s",
                         clock_text((double)(p->total - p->bytes) / rate, t, sizeof(t)));
        return buf;
}

static int columns(FILE *f)
{
        struct winsize ws;

        if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
                return ws.ws_col > 200 ? 200 : ws.ws_col;
        return 80;
}

static void draw_bar(struct m40_progress *p)
{
        char have[32], total[32], rate[32], left[48], tail[128], bar[160];
        int width, fill, lw;

        m40_store_human_bytes(p->bytes, have, sizeof(have));
        m40_store_human_bytes((unsigned long long)m40_progress_rate(p), rate, sizeof(rate));
        if (p->total)
                snprintf(tail, sizeof(tail), " %3d%% %9s / %-9s %9s/s  %s",
                         (int)(p->bytes * 100 / p->total), have,
                         m40_store_human_bytes(p->total, total, sizeof(total)), rate,
                         eta(p, left, sizeof(left)));
        else
                snprintf(tail, sizeof(tail), " %9s %9s/s", have, rate);
        /* the label (at most 20 columns), a bar of 10..50 in what is left, the figures */
        lw = (int)strlen(p->label) < 20 ? (int)strlen(p->label) : 20;
        width = columns(p->f) - 1 - (int)strlen(tail) - lw - 3;
        if (width > 50)
                width = 50;
        if (!p->total || width < 10) {
                fprintf(p->f, "\r%.*s%s\033[K", lw, p->label, tail);
        } else {
                fill = (int)((double)p->bytes / (double)p->total * width);
                if (fill > width)
                        fill = width;
                memset(bar, '#', (size_t)fill);
                memset(bar + fill, '.', (size_t)(width - fill));
                bar[width] = '\0';
                fprintf(p->f, "\r%.*s [%s]%s\033[K", lw, p->label, bar, tail);
        }
        fflush(p->f);
        p->drawn = true;
}

static void line(struct m40_progress *p)
{
        char have[32], total[32], rate[32], left[48];

        m40_store_human_bytes(p->bytes, have, sizeof(have));
        m40_store_human_bytes((unsigned long long)m40_progress_rate(p), rate, sizeof(rate));
        if (p->total)
                fprintf(p->f, "%s: %d%% (%s of %s) at %s/s, %s\n", p->label,
                        (int)(p->bytes * 100 / p->total), have,
                        m40_store_human_bytes(p->total, total, sizeof(total)), rate,
                        eta(p, left, sizeof(left)));
        else
                fprintf(p->f, "%s: %s at %s/s\n", p->label, have, rate);
        fflush(p->f);
}

void m40_progress_update(struct m40_progress *p, uint64_t bytes)
{
        double t = now_s();

        p->bytes = bytes;
        if (t - p->last < 0.25)
                return;
        p->last = t;
        p->win_t[p->win_i] = t;
        p->win_b[p->win_i] = bytes;
        p->win_i = (p->win_i + 1) % M40_PROGRESS_WINDOW;
        if (p->win_n < M40_PROGRESS_WINDOW)
                p->win_n++;
        if (p->tty) {
                draw_bar(p);
        } else if (p->total) {
                int d = (int)(bytes * 10 / p->total);

                if (d > p->decile && d < 10) {
                        p->decile = d;
                        line(p);
                }
        } else if (t - p->t0 >= 30.0 * (p->decile + 1)) {
                p->decile++;
                line(p);
        }
}

void m40_progress_end(struct m40_progress *p, bool done)
{
        double dt = now_s() - p->t0;

        p->last = p->t0 + dt;
        if (done && dt > 0) {
                /* the final figure: the average over the whole transfer */
                p->win_n = 2;
                p->win_i = 2;
                p->win_t[0] = p->t0;
                p->win_b[0] = p->start;
                p->win_t[1] = p->t0 + dt;
                p->win_b[1] = p->bytes;
        }
        if (p->tty) {
                if (done || p->drawn)
                        draw_bar(p);
                fputc('\n', p->f);
                fflush(p->f);
        } else if (done) {
                line(p);
        }
        p->drawn = false;
}
