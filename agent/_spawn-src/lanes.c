/* agent/_spawn-src/lanes.c: LaneThreads, the Python side: what it is for and its protocol (below),
its methods and its type (x86-64 Linux).  Its structures: spawn.h; making and stopping its
threads: lanes_setup.c; what a lane thread does: lanes_thread.c.

LaneThreads: the next unit started on a freed core the moment the one before it exits.

A unit's exit wakes the agent, whose Python loop then starts the next unit on the freed core:
about 200 us of its work, through which that core idles whenever the agent was woken on the
other one (half the exits on 2 cores, measured with bench/sched_trace.py).  A LaneThreads is a
thread per core (LaneThreads(journal, slots, quiet, cpus): cpus[slot] is the slot's real core;
None: one thread, unbound), without the interpreter, bound to its core, that waits for the exits
of the units it started there and starts the next unit waiting *ahead* at once: the exit of a
unit frees the very core whose thread starts the next.  (A single thread for all cores was woken
where it last ran, behind a busy thread on the other core, and was kept there as cache-hot
while the freed core idled: 8 % fewer units a second on 2 cores.)

Work-conserving: the units waiting ahead are ONE queue, in the agent's order, shared by every
slot; whichever slot frees first takes its head.  (A queue per slot made a short unit wait
behind a long one while other cores idled: 1.5 x the greedy makespan for mixed durations.)  A
slot's allocation has a shape, `key` (the agent's small int for it); a unit ahead has the key of
the allocation it asks for, and a freed slot takes the head only when their keys match: it
takes over the slot's allocation as it is.  When they do not, the slot is left free (its exit
said alone) and the agent places the head itself.  Handles for the lanes are not bound to a
slot: their environment ends with room for a slot's own entries (the ids of its allocation),
which the thread fills in, with the slot's core mask, just before the clone.
Protocol (slot: the agent's name for a core; at most one unit runs in a slot):
    start(slot, handle, key, env, cpus)
                         start a prepared handle (prepare()) in a free slot now, through the
                         slot's thread; the slot's allocation has shape `key`, its own
                         environment entries `env` (a tuple of bytes, at most SLOT_ENV_MAX) and
                         cores `cpus` (None: unbound), which every unit started there gets.
                         (pid, stdout read end, stderr read end)
    follow(key, handle, line, seq) -> bool
                         queue a unit ahead (False: the queue is full, nothing kept): the thread
                         of a freed slot of the same key appends `line` to the journal and
                         starts it; `seq` names it in take()
    withdraw(most=-1)    take back the units ahead that have not started (at most `most`,
                         from the head; all: -1): their seqs, in order
    take()               what happened since, in order: ("exit", slot, pid, code, group, -1,
                         at, 0) and ("start", slot, pid, errno, out, err, at, seq)
                         (group: 1 when a process of its process group still ran as it was
                         reaped, else 0; pid 0: it could not start, and the next one ahead gets
                         its turn; at: when, as time.time())
    fd                   readable when take() has something
    close()              stop the threads (the units they started run on)
A slot's exit and the starts that follow it in that slot are said together: the agent tells from
them whether the allocation passed on.
Pipes: a handle for a lane has -1 for stdout and stderr (or -2 for stderr: into
stdout's pipe); the thread makes the pipes just before the clone and closes its write ends just
after, so no other child ever holds them (a clone copies every descriptor until its exec), and
the read ends (non-blocking) are the agent's.
Its children are its own (a wait with __WNOTHREAD in the agent's thread does not see them); it
reaps them (__WALL), woken by each one's pidfd.  If the agent dies, the kernel gives them to
the reaper as usual.  LaneThreads(journal, slots, quiet): with `quiet` the thread leaves SIGCHLD
unblocked, for a process whose SIGCHLD is at its default (ignored): the kernel then drops each
child's SIGCHLD as it is made, where a blocked one was delivered to the interpreter's thread
and woke it for every unit that exited (agent/agent.py).  The thread holds mu only to take the
head of the queue and to say what it did: the journal line and the clone go without it, so
follow(), withdraw() and take() from the agent (which hold the interpreter) never wait for a
clone (they did: 47 and 104 us a call on average). */

#include "spawn.h"

#ifdef HAVE_START
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* (interpreter held) give a prepared handle's envp room for a slot's entries at its end */
static int
make_room(Started *h)
{
    struct started_args *a = h->a;
    if (a->room)
        return 0;
    unsigned n = 0;
    while (a->envp[n] != NULL)
        n++;
    char **more = PyMem_Realloc(a->envp, (n + SLOT_ENV_MAX + 1) * sizeof *more);
    if (more == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    a->envp = more;
    a->nenv = n;
    a->room = 1;
    return 0;
}

static int
slot_arg(LaneThreads *L, unsigned slot)
{
    if (slot >= L->nslots) {
        PyErr_Format(PyExc_ValueError, "slot %u: there are %u", slot, L->nslots);
        return -1;
    }
    if (!L->running) {
        PyErr_SetString(PyExc_ValueError, "the lane threads are closed");
        return -1;
    }
    return 0;
}

/* a slot's own environment (a tuple of at most SLOT_ENV_MAX bytes) -> pointers into it */
static int
slot_env(PyObject *env_t, char **env, unsigned *nenv)
{
    Py_ssize_t n = PyTuple_GET_SIZE(env_t);
    if (n > SLOT_ENV_MAX) {
        PyErr_Format(PyExc_ValueError, "env: at most %d entries of a slot's own", SLOT_ENV_MAX);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(env_t, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "env[%zd] must be bytes", i);
            return -1;
        }
        if (PyBytes_AsStringAndSize(item, &env[i], NULL) < 0)
            return -1;
    }
    *nenv = (unsigned)n;
    return 0;
}

static PyObject *
LaneThreads_start(LaneThreads *L, PyObject *args)
{
    unsigned slot;
    int key;
    Started *h;
    PyObject *env_o, *cpus_o;
    if (!PyArg_ParseTuple(args, "IO!iOO", &slot, &StartedType, &h, &key, &env_o, &cpus_o) ||
        slot_arg(L, slot) < 0)
        return NULL;
    PyObject *env_t = PySequence_Tuple(env_o);
    if (env_t == NULL)
        return NULL;
    char *env[SLOT_ENV_MAX];
    unsigned nenv = 0;
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    int bind = cpus_o != Py_None;
    if (slot_env(env_t, env, &nenv) < 0 || (bind && fill_set(cpus_o, "cpus", add_cpu, &cpus) < 0) ||
        make_room(h) < 0) {
        Py_DECREF(env_t);
        return NULL;
    }
    pthread_mutex_lock(&L->mu);
    struct lslot *s = &L->slots[slot];
    if (s->pid != 0 || s->next != NULL || s->starting) {
        pthread_mutex_unlock(&L->mu);
        Py_DECREF(env_t);
        PyErr_Format(PyExc_ValueError, "slot %u is taken (pid %d)", slot, (int)s->pid);
        return NULL;
    }
    /* the slot is free: no unit started there can still read its old entries (each was
       reaped, after its exec) */
    PyObject *old = s->env_t;
    s->env_t = env_t;
    memcpy(s->env, env, sizeof env);
    s->nenv = nenv;
    s->key = key;
    s->bind = bind;
    s->cpus = cpus;
    fill_slot(h, s);
    Py_INCREF(h);
    s->next = h;
    s->now = 1;
    uint64_t one = 1;
    (void)!write(L->workers[s->worker].cmd, &one, sizeof one);
    pid_t pid;
    int out, err;
    Py_BEGIN_ALLOW_THREADS
    while (s->now)
        pthread_cond_wait(&L->started, &L->mu);
    pid = s->result;
    out = s->out;
    err = s->err;
    pthread_mutex_unlock(&L->mu);
    Py_END_ALLOW_THREADS
    Py_XDECREF(old);
    if (pid < 0) {
        Py_DECREF(h);
        errno = -pid;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(iii)", (int)pid, out, err);
}

static PyObject *
LaneThreads_follow(LaneThreads *L, PyObject *args)
{
    int key;
    Started *h;
    PyObject *line;
    unsigned long long seq;
    if (!PyArg_ParseTuple(args, "iO!SK", &key, &StartedType, &h, &line, &seq))
        return NULL;
    if (!L->running) {
        PyErr_SetString(PyExc_ValueError, "the lane threads are closed");
        return NULL;
    }
    if (make_room(h) < 0)
        return NULL;
    pthread_mutex_lock(&L->mu);
    int ok = L->an < AHEAD_MAX;
    if (ok) {
        Py_INCREF(h);
        Py_INCREF(line);
        L->ahead[(L->ah + L->an) % AHEAD_MAX] = (struct lahead){h, line, key, seq};
        L->an++;
    }
    pthread_mutex_unlock(&L->mu);
    return PyBool_FromLong(ok);
}

static PyObject *
LaneThreads_withdraw(LaneThreads *L, PyObject *args)
{
    long most = -1;
    if (!PyArg_ParseTuple(args, "|l", &most))
        return NULL;
    pthread_mutex_lock(&L->mu);
    unsigned n = L->an, ah = L->ah;
    if (most >= 0 && (unsigned long)most < n)
        n = (unsigned)most;
    struct lahead *back = n ? malloc(n * sizeof *back) : NULL;
    if (n && back == NULL) {
        pthread_mutex_unlock(&L->mu);
        return PyErr_NoMemory();
    }
    for (unsigned k = 0; k < n; k++)
        back[k] = L->ahead[(ah + k) % AHEAD_MAX];
    L->ah = (ah + n) % AHEAD_MAX; /* (from the head: the rest keep their order) */
    L->an -= n;
    pthread_mutex_unlock(&L->mu);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (unsigned k = 0; k < n; k++) {
        if (out != NULL) {
            PyObject *seq = PyLong_FromUnsignedLongLong(back[k].seq);
            if (seq == NULL)
                Py_CLEAR(out);
            else
                PyList_SET_ITEM(out, (Py_ssize_t)k, seq);
        }
        Py_DECREF(back[k].h);
        Py_DECREF(back[k].line);
    }
    free(back);
    return out;
}

static PyObject *
LaneThreads_take(LaneThreads *L, PyObject *Py_UNUSED(ignored))
{
    uint64_t n;
    (void)!read(L->ready, &n, sizeof n);
    pthread_mutex_lock(&L->mu);
    struct lrec *recs = L->recs;
    size_t nrecs = L->nrecs;
    L->recs = NULL;
    L->nrecs = L->caprecs = 0;
    pthread_mutex_unlock(&L->mu);
    PyObject *out = PyList_New((Py_ssize_t)nrecs);
    for (size_t i = 0; i < nrecs; i++) {
        struct lrec *r = &recs[i];
        if (out != NULL) {
            PyObject *t = Py_BuildValue("(sIiiiidK)", r->start ? "start" : "exit", r->slot,
                                        (int)r->pid, r->value, r->out, r->err, r->at, r->seq);
            if (t == NULL)
                Py_CLEAR(out);
            else
                PyList_SET_ITEM(out, (Py_ssize_t)i, t);
        }
        Py_XDECREF(r->drop[0]);
        Py_XDECREF(r->drop[1]);
    }
    free(recs);
    return out;
}

static PyObject *
LaneThreads_close(LaneThreads *L, PyObject *Py_UNUSED(ignored))
{
    LaneThreads_stop(L);
    Py_RETURN_NONE;
}

static PyObject *
LaneThreads_fd(LaneThreads *L, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(L->ready);
}

static PyMethodDef LaneThreads_methods[] = {
    {"start", (PyCFunction)LaneThreads_start, METH_VARARGS,
     "start(slot, handle, key, env, cpus) -> (pid, stdout read end, stderr read end): start "
     "it now in a free slot, whose allocation has shape `key`, entries `env` and cores `cpus`."},
    {"follow", (PyCFunction)LaneThreads_follow, METH_VARARGS,
     "follow(key, handle, line, seq) -> bool: queue `handle` ahead, for a freed slot of `key`."},
    {"withdraw", (PyCFunction)LaneThreads_withdraw, METH_VARARGS,
     "withdraw(most=-1) -> [seq]: take back (at most `most` of) the units ahead that have "
     "not started, from the head, in order."},
    {"take", (PyCFunction)LaneThreads_take, METH_NOARGS,
     "take() -> [(\"exit\"|\"start\", slot, pid, code|errno, out, err, at, seq)] since the "
     "last."},
    {"close", (PyCFunction)LaneThreads_close, METH_NOARGS, "Stop the threads."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef LaneThreads_getset[] = {
    {"fd", (getter)LaneThreads_fd, NULL, "Readable when take() has something.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject LaneThreadsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pilot.agent._spawn.LaneThreads",
    .tp_basicsize = sizeof(LaneThreads),
    .tp_dealloc = (destructor)LaneThreads_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "LaneThreads(journal_fd, nslots): successors started by a thread as units exit.",
    .tp_methods = LaneThreads_methods,
    .tp_getset = LaneThreads_getset,
    .tp_new = LaneThreads_new,
};
#endif /* HAVE_START */
