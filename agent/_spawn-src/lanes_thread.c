/* agent/_spawn-src/lanes_thread.c: what a LaneThreads' lane thread does (lane_main): it waits
   on its slots' pidfds, reaps a unit that exited and starts the head of the queue ahead in the
   freed slot (its journal line and its clone without mu), starts what start() asks for, and
   says what it did (the records take() returns).  What it is for and the protocol: lanes.c.
   x86-64 Linux (HAVE_START). */

#include "spawn.h"

#ifdef HAVE_START
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#define SAID_MAX 64     /* starts tried after one exit (each that fails lets the next try) */

static double
now_epoch(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
push_rec(LaneThreads *L, struct lrec r)
{
    if (r.at == 0)
        r.at = now_epoch();
    if (L->nrecs == L->caprecs) {
        size_t cap = L->caprecs ? L->caprecs * 2 : 64;
        struct lrec *more = realloc(L->recs, cap * sizeof *more);
        if (more == NULL)
            return -1;
        L->recs = more;
        L->caprecs = cap;
    }
    L->recs[L->nrecs++] = r;
    L->pushed++;
    return 0;
}

static void
watch(LaneThreads *L, unsigned slot, int pidfd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = slot};
    epoll_ctl(L->workers[L->slots[slot].worker].ep, EPOLL_CTL_ADD, pidfd, &ev);
}

static int
write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* (mu held, or the handle not shared yet) handle `h` as slot `s` starts it: the slot's
   environment entries after its own, and the slot's cores */
void
fill_slot(Started *h, struct lslot *s)
{
    struct started_args *a = h->a;
    for (unsigned i = 0; i < s->nenv; i++)
        a->envp[a->nenv + i] = s->env[i];
    a->envp[a->nenv + s->nenv] = NULL;
    a->bind = s->bind;
    a->cpus = s->cpus;
}

/* Start handle `h` (mu held): its stdout and stderr pipes are made here, just before the clone,
   so that no other child of this process ever holds their write ends (a clone copies every
   descriptor the process has, and keeps it until its exec).  fds[1] / fds[2] of a prepared
   handle are -1 (a pipe of its own) or, for fds[2], -2 (stderr into stdout's pipe).  Sets
   *out / *err to the read ends (non-blocking, close-on-exec) and returns the pid, or -errno
   with nothing left open. */
static pid_t
start_piped(Started *h, int *pidfd, int *out, int *err)
{
    struct started_args *a = h->a;
    int o[2] = {-1, -1}, e[2] = {-1, -1};
    pid_t pid;
    if (pipe2(o, O_CLOEXEC) < 0 || (a->fds[2] != -2 && pipe2(e, O_CLOEXEC) < 0)) {
        pid = -errno;
        goto done;
    }
    int keep2 = a->fds[2];
    a->fds[1] = o[1];
    a->fds[2] = keep2 == -2 ? o[1] : e[1];
    pid = clone_started(h, CLONE_PIDFD, pidfd); /* (the child reads a->fds: left as they are) */
    if (pid > 0) {
        fcntl(o[0], F_SETFL, O_NONBLOCK);
        if (e[0] >= 0)
            fcntl(e[0], F_SETFL, O_NONBLOCK);
        *out = o[0];
        *err = e[0] >= 0 ? e[0] : o[0];
        o[0] = e[0] = -1;
    }
done:
    /* the child has its own copies of the write ends (its descriptors are its own) */
    for (int *fd = o; fd < o + 2; fd++)
        if (*fd >= 0)
            close(*fd);
    for (int *fd = e; fd < e + 2; fd++)
        if (*fd >= 0)
            close(*fd);
    return pid;
}

/* (mu held; let go of while a unit's journal line is written and it is cloned) slot's unit
   has exited: reap it, start the head of the queue ahead there when it asks for the slot's
   allocation (or the next one that starts) */
static void
on_exit_of(LaneThreads *L, unsigned slot)
{
    struct lslot *s = &L->slots[slot];
    if (s->pid == 0)
        return;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, s->pid, &si, WEXITED | WNOHANG | __WALL) < 0 || si.si_pid == 0)
        return; /* not yet */
    epoll_ctl(L->workers[s->worker].ep, EPOLL_CTL_DEL, s->pidfd, NULL);
    close(s->pidfd);
    /* whether anything it started still runs in its process group (its sandbox is not
       recycled then): asked here, at once, where the agent's thread would raise an exception
       for every unit that left nothing behind */
    int group = kill(-s->pid, 0) == 0 || errno != ESRCH;
    struct lrec r = {.start = 0, .slot = slot, .pid = s->pid,
                     .value = si.si_code == CLD_EXITED ? si.si_status : -si.si_status,
                     .out = group, .err = -1, .drop = {(PyObject *)s->cur, NULL}};
    s->pid = 0;
    s->pidfd = -1;
    s->cur = NULL;
    r.at = now_epoch();
    /* the exit and the starts that follow it are pushed together: the agent tells from them
       whether the allocation passed on to the next unit (Lanes.news) */
    struct lrec said[SAID_MAX + 1];
    unsigned nsaid = 0;
    said[nsaid++] = r;
    while (s->pid == 0 && L->an > 0 && L->ahead[L->ah].key == s->key && nsaid <= SAID_MAX) {
        struct lahead e = L->ahead[L->ah];
        L->ah = (L->ah + 1) % AHEAD_MAX;
        L->an--;
        Started *h = e.h;
        fill_slot(h, s);
        struct lrec st = {.start = 1, .slot = slot, .out = -1, .err = -1, .seq = e.seq,
                          .drop = {e.line, NULL}};
        /* the journal line and the clone without mu: the agent's follow(), withdraw() and
           take() do not wait for them (h is out of the queue: no withdraw() returns it) */
        s->starting = 1;
        pthread_mutex_unlock(&L->mu);
        /* journaled before it can start: a unit in the journal is never started again */
        int err = write_all(L->journal, PyBytes_AS_STRING(e.line),
                            (size_t)PyBytes_GET_SIZE(e.line));
        int pidfd = -1;
        pid_t pid = 0;
        if (err == 0) {
            pid = start_piped(h, &pidfd, &st.out, &st.err);
            if (pid > 0)
                watch(L, slot, pidfd);
            else
                err = pid;
        }
        st.at = now_epoch();
        pthread_mutex_lock(&L->mu);
        s->starting = 0;
        if (err == 0) {
            s->pid = pid;
            s->pidfd = pidfd;
            s->cur = h;
            st.pid = pid;
        } else { /* it never ran: the next one ahead gets its turn */
            st.value = -err;
            st.drop[1] = (PyObject *)h;
        }
        said[nsaid++] = st;
    }
    for (unsigned k = 0; k < nsaid; k++)
        if (push_rec(L, said[k]) < 0)
            return; /* (out of memory: nothing more can be said) */
}

/* (mu held) start the units start() asked for in worker w's slots, in its thread: its
   children are the lane threads' (a wait with __WNOTHREAD in another thread does not see them) */
static void
start_now(LaneThreads *L, unsigned w)
{
    for (unsigned slot = 0; slot < L->nslots; slot++) {
        struct lslot *s = &L->slots[slot];
        if (!s->now || s->worker != w)
            continue;
        int pidfd = -1;
        pid_t pid = start_piped(s->next, &pidfd, &s->out, &s->err);
        if (pid > 0) {
            s->pid = pid;
            s->pidfd = pidfd;
            s->cur = s->next; /* (its ref) */
            watch(L, slot, pidfd);
        }
        s->result = pid;
        s->next = NULL;
        s->now = 0;
    }
    pthread_cond_broadcast(&L->started);
}

void *
lane_main(void *p)
{
    struct lworker *W = p;
    LaneThreads *L = W->L;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(W->ep, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        pthread_mutex_lock(&L->mu);
        unsigned long before = L->pushed;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u32 == STOP_SLOT) {
                pthread_mutex_unlock(&L->mu);
                return NULL;
            }
            if (evs[i].data.u32 == CMD_SLOT) {
                uint64_t k;
                (void)!read(W->cmd, &k, sizeof k);
                start_now(L, W->index);
                continue;
            }
            if (evs[i].data.u32 < L->nslots)
                on_exit_of(L, evs[i].data.u32);
        }
        int said = L->pushed != before;
        pthread_mutex_unlock(&L->mu);
        if (said) {
            uint64_t one = 1;
            (void)!write(L->ready, &one, sizeof one);
        }
    }
}
#endif /* HAVE_START */
