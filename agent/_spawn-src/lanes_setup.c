/* agent/_spawn-src/lanes_setup.c: a LaneThreads made (LaneThreads_new: a lane thread per core,
   each with its epoll and its wake-up), its threads stopped (close()) and it freed.  What it is
   for and the protocol: lanes.c; what a lane thread does: lanes_thread.c.  x86-64 Linux
   (HAVE_START). */

#include "spawn.h"

#ifdef HAVE_START
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* the real core of each slot (cpus: a sequence of ints, or None: unknown) -> L->workers, one
   per core (past MAX_WORKERS cores, each takes the cores i, i + MAX_WORKERS, ...) */
#define MAX_WORKERS 64
static int
make_workers(LaneThreads *L, PyObject *cpus_o)
{
    long *core = NULL;
    long distinct[MAX_WORKERS * 4];
    unsigned nd = 0;
    if (cpus_o != Py_None) {
        PyObject *fast = PySequence_Fast(cpus_o, "cpus must be a sequence of core ids");
        if (fast == NULL)
            return -1;
        if ((size_t)PySequence_Fast_GET_SIZE(fast) != L->nslots) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_ValueError, "cpus: one core id per slot (%u)", L->nslots);
            return -1;
        }
        core = PyMem_Malloc(L->nslots * sizeof *core);
        if (core == NULL) {
            Py_DECREF(fast);
            PyErr_NoMemory();
            return -1;
        }
        for (unsigned i = 0; i < L->nslots; i++) {
            long c = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
            if ((c == -1 && PyErr_Occurred()) || c < 0 || c >= CPU_SETSIZE) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "cpus: %ld is not a core id", c);
                Py_DECREF(fast);
                PyMem_Free(core);
                return -1;
            }
            core[i] = c;
        }
        Py_DECREF(fast);
    }
    /* one worker per distinct core (in order of the slots), at most MAX_WORKERS */
    for (unsigned i = 0; core != NULL && i < L->nslots; i++) {
        unsigned k = 0;
        while (k < nd && distinct[k] != core[i])
            k++;
        if (k == nd && nd < sizeof distinct / sizeof *distinct)
            distinct[nd++] = core[i];
    }
    L->nworkers = nd == 0 ? 1 : (nd < MAX_WORKERS ? nd : MAX_WORKERS);
    L->workers = calloc(L->nworkers, sizeof *L->workers);
    if (L->workers == NULL) {
        PyMem_Free(core);
        PyErr_NoMemory();
        return -1;
    }
    for (unsigned w = 0; w < L->nworkers; w++) {
        L->workers[w].L = L;
        L->workers[w].index = w;
        L->workers[w].ep = L->workers[w].cmd = -1;
        CPU_ZERO(&L->workers[w].cpus);
    }
    for (unsigned i = 0; i < L->nslots; i++) {
        unsigned w = 0;
        if (core != NULL && nd > 0) {
            unsigned k = 0;
            while (k < nd && distinct[k] != core[i])
                k++;
            w = (k < nd ? k : (unsigned)core[i]) % L->nworkers;
            L->workers[w].bind = 1;
            CPU_SET((int)core[i], &L->workers[w].cpus);
        }
        L->slots[i].worker = w;
    }
    PyMem_Free(core);
    return 0;
}

PyObject *
LaneThreads_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"journal", "slots", "quiet", "cpus", NULL};
    int journal, quiet = 0;
    unsigned nslots;
    PyObject *cpus_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iI|pO", names, &journal, &nslots, &quiet,
                                     &cpus_o))
        return NULL;
    if (nslots == 0 || nslots >= CMD_SLOT) {
        PyErr_SetString(PyExc_ValueError, "nslots: at least 1");
        return NULL;
    }
    LaneThreads *L = (LaneThreads *)type->tp_alloc(type, 0);
    if (L == NULL)
        return NULL;
    L->ready = L->stop = -1;
    L->journal = journal;
    L->nslots = nslots;
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->started, NULL);
    L->slots = calloc(nslots, sizeof *L->slots);
    L->ahead = calloc(AHEAD_MAX, sizeof *L->ahead);
    if (L->slots == NULL || L->ahead == NULL) {
        Py_DECREF(L);
        return PyErr_NoMemory();
    }
    for (unsigned i = 0; i < nslots; i++) {
        L->slots[i].pidfd = -1;
        L->slots[i].key = -1;
    }
    if (make_workers(L, cpus_o) < 0) {
        Py_DECREF(L);
        return NULL;
    }
    L->ready = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    L->stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (L->ready < 0 || L->stop < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(L);
        return NULL;
    }
    for (unsigned w = 0; w < L->nworkers; w++) {
        struct lworker *W = &L->workers[w];
        W->ep = epoll_create1(EPOLL_CLOEXEC);
        W->cmd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (W->ep < 0 || W->cmd < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            Py_DECREF(L);
            return NULL;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = STOP_SLOT};
        epoll_ctl(W->ep, EPOLL_CTL_ADD, L->stop, &ev); /* (never read: every worker sees it) */
        struct epoll_event cev = {.events = EPOLLIN, .data.u32 = CMD_SLOT};
        epoll_ctl(W->ep, EPOLL_CTL_ADD, W->cmd, &cev);
    }
    /* the threads take no signal (they are the interpreter's; SIGCHLD when quiet: see lanes.c),
       and their clones start with all blocked, as clone_started wants; each runs on its
       slots' cores: a unit's exit wakes the one on the core it freed */
    sigset_t all, old;
    sigfillset(&all);
    if (quiet)
        sigdelset(&all, SIGCHLD);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (unsigned w = 0; w < L->nworkers && rc == 0; w++) {
        struct lworker *W = &L->workers[w];
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (W->bind)
            pthread_attr_setaffinity_np(&attr, sizeof W->cpus, &W->cpus);
        rc = pthread_create(&W->thread, &attr, lane_main, W);
        if (rc != 0 && W->bind) { /* (a core this process may not use any more: unbound) */
            pthread_attr_destroy(&attr);
            pthread_attr_init(&attr);
            rc = pthread_create(&W->thread, &attr, lane_main, W);
        }
        pthread_attr_destroy(&attr);
        if (rc == 0) {
            W->made = 1;
            pthread_setname_np(W->thread, "agent-lane"); /* (as ps and /proc show it) */
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    L->running = 1; /* (LaneThreads_stop stops the threads made, if not all could be) */
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(L);
        return NULL;
    }
    return (PyObject *)L;
}

void
LaneThreads_stop(LaneThreads *L)
{
    if (!L->running)
        return;
    uint64_t one = 1;
    (void)!write(L->stop, &one, sizeof one);
    Py_BEGIN_ALLOW_THREADS
    for (unsigned w = 0; w < L->nworkers; w++)
        if (L->workers[w].made)
            pthread_join(L->workers[w].thread, NULL);
    Py_END_ALLOW_THREADS
    L->running = 0;
}

void
LaneThreads_dealloc(LaneThreads *L)
{
    LaneThreads_stop(L);
    if (L->slots != NULL) {
        for (unsigned i = 0; i < L->nslots; i++) {
            if (L->slots[i].pidfd >= 0)
                close(L->slots[i].pidfd);
            Py_XDECREF(L->slots[i].cur);
            Py_XDECREF(L->slots[i].next);
            Py_XDECREF(L->slots[i].env_t);
        }
        free(L->slots);
    }
    for (unsigned k = 0; L->ahead != NULL && k < L->an; k++) {
        struct lahead *e = &L->ahead[(L->ah + k) % AHEAD_MAX];
        Py_DECREF(e->h);
        Py_DECREF(e->line);
    }
    free(L->ahead);
    for (size_t i = 0; i < L->nrecs; i++) {
        Py_XDECREF(L->recs[i].drop[0]);
        Py_XDECREF(L->recs[i].drop[1]);
    }
    free(L->recs);
    for (unsigned w = 0; L->workers != NULL && w < L->nworkers; w++) {
        if (L->workers[w].ep >= 0)
            close(L->workers[w].ep);
        if (L->workers[w].cmd >= 0)
            close(L->workers[w].cmd);
    }
    free(L->workers);
    if (L->ready >= 0)
        close(L->ready);
    if (L->stop >= 0)
        close(L->stop);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->started);
    Py_TYPE(L)->tp_free((PyObject *)L);
}
#endif /* HAVE_START */
