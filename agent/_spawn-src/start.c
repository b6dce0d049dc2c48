/* agent/_spawn-src/start.c: start(), a unit's process started as spawn() does (vfork_spawn.c),
without waiting for the exec (x86-64 Linux); its handle, Started (the child's code and what the
agent asks of it); prepare(), a handle not started yet (for a LaneThreads, lanes.c).  How the
child is made (clone3, else clone): clone.c.

The agent's wait in vfork lasts until the child has exec'd, and the child is bound to a core
that is often busy (the client, the agent's own other work): measured 280-360 us per unit on 2
busy cores, against 110 us for an unbound spawn.  start() creates the child with clone(CLONE_VM)
but without CLONE_VFORK: it returns as soon as the child exists, and the child sets itself up
and execs on its own stack (part of the handle) while the agent goes on.  Sharing memory with a
*running* parent asks more of the child than vfork does: it must not touch the parent thread's
errno (libc wrappers set it on failure; the child's thread pointer is the parent's), so it
makes raw system calls only.  The kernel tells when it has left the shared memory: it clears
the handle's `tid` (CLONE_CHILD_CLEARTID) when the child execs or exits, and only then may the
handle's memory be freed.  A failure before or at exec is written into the handle first and
the child exits 127; `Started.error()` reads it once `settled()`.  The parent makes the child's
process group too (as the child does), so that a kill of the group reaches it at once.  By the time waitpid has
reaped the child, it has settled (the kernel clears tid before the exit is reported).
*/

#include "spawn.h"

#ifdef HAVE_START
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

/* nothing the compiler may add to a function (a stack-protector check reads the parent
   thread's TLS; instrumentation calls into libc) is wanted in the child */
#if defined(__has_attribute)
#if __has_attribute(no_stack_protector)
#define CHILD_ATTRS __attribute__((noinline, no_stack_protector, no_instrument_function))
#endif
#endif
#ifndef CHILD_ATTRS
#define CHILD_ATTRS \
    __attribute__((noinline, optimize("no-stack-protector"), no_instrument_function))
#endif

int CHILD_ATTRS
started_child(void *p)
{
    struct started_args *a = p;
    struct ksigaction dfl, cur;
    long r;
    dfl.handler = SIG_DFL;
    dfl.flags = 0;
    dfl.restorer = NULL;
    dfl.mask = 0;
    for (int s = 1; s <= 64; s++) {
        if (s == SIGKILL || s == SIGSTOP)
            continue;
        if (a->reset & (1UL << (s - 1))) {
            raw(SYS_rt_sigaction, s, (long)&dfl, 0, KSIGSET);
            continue;
        }
        if (a->cleared)
            continue; /* (no handler is left: the clone reset them) */
        if (raw(SYS_rt_sigaction, s, 0, (long)&cur, KSIGSET) == 0 && cur.handler != SIG_IGN &&
            cur.handler != SIG_DFL)
            raw(SYS_rt_sigaction, s, (long)&dfl, 0, KSIGSET);
    }
    int fds[3] = {a->fds[0], a->fds[1], a->fds[2]};
    if (a->bind && (r = raw(SYS_sched_setaffinity, 0, sizeof a->cpus, (long)&a->cpus, 0)) < 0) {
        a->step = STEP_BIND;
        goto fail;
    }
    if ((r = raw(SYS_setpgid, 0, 0, 0, 0)) < 0) {
        a->step = STEP_OTHER;
        goto fail;
    }
    /* as in child() (vfork_spawn.c): a descriptor among 0-2 out of place moves up */
    for (int t = 0; t < 3; t++) {
        if (fds[t] < 3 && fds[t] != t) {
            r = raw(SYS_fcntl, fds[t], F_DUPFD_CLOEXEC, 3, 0);
            if (r < 0) {
                a->step = STEP_OTHER;
                goto fail;
            }
            for (int u = t + 1; u < 3; u++)
                if (fds[u] == fds[t])
                    fds[u] = (int)r;
            fds[t] = (int)r;
        }
    }
    for (int t = 0; t < 3; t++) {
        r = fds[t] == t ? raw(SYS_fcntl, t, F_SETFD, 0, 0) : raw(SYS_dup2, fds[t], t, 0, 0);
        if (r < 0) {
            a->step = STEP_OTHER;
            goto fail;
        }
    }
    if ((r = raw(SYS_chdir, (long)a->cwd, 0, 0, 0)) < 0) {
        a->step = STEP_CHDIR;
        goto fail;
    }
    unsigned long none = 0;
    raw(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, KSIGSET);
    r = raw(SYS_execve, (long)a->path, (long)a->argv, (long)a->envp, 0);
    a->step = STEP_EXEC;
fail:
    a->err = (int)-r;
    raw(SYS_exit, 127, 0, 0, 0);
    __builtin_unreachable();
}

static int
started_settled(Started *s)
{
    return __atomic_load_n(&s->a->tid, __ATOMIC_ACQUIRE) == 0;
}

static void
Started_dealloc(Started *s)
{
    if (s->a != NULL && !started_settled(s)) {
        /* the child may still read this memory (stopped before its exec?): it is never
           freed then, and neither are the strings it points into */
        s->a = NULL;
        s->argv_t = s->env_t = NULL;
    }
    if (s->a != NULL) {
        PyMem_Free(s->a->argv); /* (to_array's) */
        PyMem_Free(s->a->envp);
        PyMem_RawFree(s->a);
    }
    Py_XDECREF(s->argv_t);
    Py_XDECREF(s->env_t);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *
Started_settled(Started *s, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(started_settled(s));
}

static PyObject *
Started_wait(Started *s, PyObject *arg)
{
    double timeout = PyFloat_AsDouble(arg);
    if (timeout == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(timeout >= 0.0)) /* (NaN too) */
        timeout = 0.0;
    if (timeout > 86400.0)
        timeout = 86400.0;
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)timeout;
    end.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    int settled;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        pid_t tid = __atomic_load_n(&s->a->tid, __ATOMIC_ACQUIRE);
        if ((settled = tid == 0))
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        struct timespec left = {end.tv_sec - now.tv_sec, end.tv_nsec - now.tv_nsec};
        if (left.tv_nsec < 0) {
            left.tv_sec--;
            left.tv_nsec += 1000000000L;
        }
        if (left.tv_sec < 0)
            break;
        syscall(SYS_futex, &s->a->tid, FUTEX_WAIT, tid, &left, NULL, 0);
    }
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(settled);
}

static PyObject *
Started_error(Started *s, PyObject *Py_UNUSED(ignored))
{
    if (!started_settled(s) || s->a->err == 0)
        Py_RETURN_NONE;
    int err = s->a->err, step = s->a->step;
    if (step == STEP_BIND)
        return PyObject_CallFunction(PyExc_OSError, "is", err, "cannot bind it to its cores");
    PyObject *fn = PyUnicode_DecodeFSDefault(step == STEP_CHDIR ? s->a->cwd : s->a->path);
    if (fn == NULL)
        return NULL;
    PyObject *exc = PyObject_CallFunction(PyExc_OSError, "isO", err, strerror(err), fn);
    Py_DECREF(fn);
    return exc;
}

static PyMethodDef Started_methods[] = {
    {"settled", (PyCFunction)Started_settled, METH_NOARGS,
     "Whether the child has left this process's memory (it has exec'd, or exited)."},
    {"wait", (PyCFunction)Started_wait, METH_O,
     "wait(timeout) -> settled: wait at most `timeout` seconds for it to settle."},
    {"error", (PyCFunction)Started_error, METH_NOARGS,
     "The OSError that kept it from starting, or None (also while not settled)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
Started_pid(Started *s, void *Py_UNUSED(closure))
{
    return PyLong_FromLong((long)s->pid);
}

static PyGetSetDef Started_getset[] = {
    {"pid", (getter)Started_pid, NULL, "The child's process id.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject StartedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pilot.agent._spawn.Started",
    .tp_basicsize = sizeof(Started),
    .tp_dealloc = (destructor)Started_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A child started by start(): its pid, whether it settled, and its error.",
    .tp_methods = Started_methods,
    .tp_getset = Started_getset,
};

static Started *
build_started(PyObject *args)
{
    const char *path, *cwd;
    int fds[3];
    PyObject *argv_o, *env_o, *cpus_o, *sigdef_o;
    if (!PyArg_ParseTuple(args, "yOOy(iii)OO", &path, &argv_o, &env_o, &cwd, &fds[0], &fds[1],
                          &fds[2], &cpus_o, &sigdef_o))
        return NULL;
    sigset_t reset;
    sigemptyset(&reset);
    if (fill_set(sigdef_o, "sigdef", add_signal, &reset) < 0)
        return NULL;
    Started *s = PyObject_New(Started, &StartedType);
    if (s == NULL)
        return NULL;
    s->argv_t = s->env_t = NULL;
    s->pid = 0;
    s->a = PyMem_RawMalloc(sizeof *s->a);
    if (s->a == NULL) {
        Py_DECREF(s);
        PyErr_NoMemory();
        return NULL;
    }
    /* zeroed but for the child's stack (16 KB that calloc cleared for every unit) */
    memset(s->a, 0, offsetof(struct started_args, stack));
    struct started_args *a = s->a; /* (tid is 0: settled, until a child exists) */
    CPU_ZERO(&a->cpus);
    a->bind = cpus_o != Py_None;
    if (a->bind && fill_set(cpus_o, "cpus", add_cpu, &a->cpus) < 0)
        goto fail;
    for (int sig = 1; sig <= 64 && sig < NSIG; sig++)
        if (sigismember(&reset, sig) == 1)
            a->reset |= 1UL << (sig - 1);
    memcpy(a->fds, fds, sizeof fds);
    s->argv_t = PySequence_Tuple(argv_o);
    if (s->argv_t == NULL)
        goto fail;
    if (PyTuple_GET_SIZE(s->argv_t) == 0) {
        PyErr_SetString(PyExc_ValueError, "argv must not be empty");
        goto fail;
    }
    s->env_t = PySequence_Tuple(env_o);
    if (s->env_t == NULL)
        goto fail;
    if ((a->argv = to_array(s->argv_t, "argv")) == NULL)
        goto fail;
    if ((a->envp = to_array(s->env_t, "env")) == NULL)
        goto fail;
    /* the child reads path and cwd after this call returns: copies that live with it */
    PyObject *held = Py_BuildValue("(OO)", PyTuple_GET_ITEM(args, 0), PyTuple_GET_ITEM(args, 3));
    if (held == NULL)
        goto fail;
    PyObject *argv_more = PySequence_Concat(s->argv_t, held);
    Py_DECREF(held);
    if (argv_more == NULL)
        goto fail;
    Py_SETREF(s->argv_t, argv_more); /* (same strings; argv is still the first n) */
    a->path = path;
    a->cwd = cwd;
    return s;
fail:
    Py_DECREF(s);
    return NULL;
}

PyObject *
start(PyObject *Py_UNUSED(self), PyObject *args)
{
    Started *s = build_started(args);
    if (s == NULL)
        return NULL;
    pid_t pid = clone_started(s, SIGCHLD, NULL);
    if (pid < 0) {
        errno = -pid;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

PyObject *
prepare(PyObject *Py_UNUSED(self), PyObject *args)
{
    return (PyObject *)build_started(args);
}

#endif /* HAVE_START */
