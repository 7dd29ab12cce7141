/* ahead.c - blends made before a slot.  A blend of chunks the mount holds
 * needs no engine, so a request blends while it would otherwise wait for a
 * slot, and holds a slot only for the restore and the answer.  At most as
 * many requests blend ahead as the up engines have slots (FIFO): more would
 * only make blends that wait for slots, hold the mount's blend ioctls (and
 * its FUSE threads) and slow the blends of the requests that are next. */
#include <errno.h>
#include <time.h>

#include "serve.h"

struct ahead_waiter {
    struct ahead_waiter *next, *prev;
};

static int ahead_cap(struct serve *sv)
{
    int n = 0;
    for (int i = 0; i < sv->n_engines; i++)
        if (sv->engines[i].up)
            n += sv->engines[i].n_slots;
    return n > 0 ? n : 1;
}

int ahead_enter(struct serve *sv, serve_cancel_fn cancel, void *arg)
{
    struct ahead_waiter w = {0};
    int rc = 0;
    pthread_mutex_lock(&sv->lock);
    w.prev = sv->ahead_tail;
    if (sv->ahead_tail)
        sv->ahead_tail->next = &w;
    else
        sv->ahead_head = &w;
    sv->ahead_tail = &w;
    sv->queue_len++; /* waiting, as for a slot: the queue depth */
    while (!(sv->ahead_head == &w && sv->ahead_running < ahead_cap(sv))) {
        if (sv->stopping || (cancel && cancel(arg))) {
            rc = -ECANCELED;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000000L; /* a client that went away is seen within 0.1 s */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&sv->cond, &sv->lock, &ts);
    }
    if (w.prev)
        w.prev->next = w.next;
    else
        sv->ahead_head = w.next;
    if (w.next)
        w.next->prev = w.prev;
    else
        sv->ahead_tail = w.prev;
    sv->queue_len--;
    if (!rc)
        sv->ahead_running++;
    pthread_cond_broadcast(&sv->cond); /* the next one may go too */
    pthread_mutex_unlock(&sv->lock);
    return rc;
}

void ahead_leave(struct serve *sv)
{
    pthread_mutex_lock(&sv->lock);
    sv->ahead_running--;
    pthread_cond_broadcast(&sv->cond);
    pthread_mutex_unlock(&sv->lock);
}
