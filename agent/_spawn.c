/* agent._spawn: start a unit's process already bound to its cores.

os.posix_spawn cannot set a CPU mask, so the agent used to bind each process after the spawn
returned, when the process is already running the dynamic loader on some core.  The kernel
then has to stop it there and move it (a synchronous migration): measured 80-95 us of the
agent's loop per unit on 2 busy cores, on top of the spawn.  Here the child sets its own mask
between vfork and exec, so it is on its cores before the program's first instruction, and the
GIL is let go while the parent waits for the exec, so the agent's other threads run meanwhile.

    spawn(path, argv, env, cwd, fds, cpus, sigdef) -> pid
        path    bytes: the program, as execve takes it (agent/spawn.py resolves bare names on
                the agent's PATH first, as posix_spawnp does: no /bin/sh fallback)
        argv    list or tuple of bytes
        env     list or tuple of b"KEY=VALUE"
        cwd     bytes: the directory it starts in
        fds     (stdin, stdout, stderr): descriptors that become 0, 1, 2
        cpus    tuple of core ids to bind it to, or None (it keeps the caller's mask)
        sigdef  tuple of signal numbers reset to their default action (besides every signal
                the caller handles: handlers do not survive an exec anyway, and must not run
                in a child that shares the caller's memory)
    The child starts in a new process group of its own, with no signal blocked.
    Raises OSError (errno of the failing step, with the path or directory) when the child
    could not be started (it has been reaped then), ValueError for a NUL byte in any string.

vfork discipline (as CPython's _posixsubprocess): everything the child reads is prepared before
vfork into `struct child_args` and kept alive until the parent resumes (private tuples of the
bytes objects, so no other thread can free a string meanwhile); the child runs in a function
of its own (`child`, never inlined) so that its locals live below the suspended parent's frame,
makes only system calls, and reports a failure through the struct before _exit(127).
*/

#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { STEP_NONE, STEP_BIND, STEP_CHDIR, STEP_EXEC, STEP_OTHER };

struct child_args {
    const char *path, *cwd;
    char **argv, **envp;
    int fds[3];
    int bind;
    cpu_set_t cpus;
    sigset_t reset;
    volatile int err, step; /* written by the child */
};

static void __attribute__((noinline, noreturn))
child(struct child_args *a)
{
    struct sigaction dfl, cur;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int s = 1; s < NSIG; s++) {
        if (s == SIGKILL || s == SIGSTOP)
            continue;
        if (sigismember(&a->reset, s)) {
            sigaction(s, &dfl, NULL);
            continue;
        }
        if (sigaction(s, NULL, &cur) == 0 && cur.sa_handler != SIG_IGN &&
            cur.sa_handler != SIG_DFL)
            sigaction(s, &dfl, NULL);
    }
    int fds[3] = {a->fds[0], a->fds[1], a->fds[2]};
    if (a->bind && sched_setaffinity(0, sizeof a->cpus, &a->cpus) != 0) {
        a->step = STEP_BIND;
        goto fail;
    }
    if (setpgid(0, 0) != 0) {
        a->step = STEP_OTHER;
        goto fail;
    }
    /* a descriptor among 0-2 that is not its own target would be overwritten by an earlier
       dup2: move it above 2 first */
    for (int t = 0; t < 3; t++) {
        if (fds[t] < 3 && fds[t] != t) {
            int moved = fcntl(fds[t], F_DUPFD_CLOEXEC, 3);
            if (moved < 0) {
                a->step = STEP_OTHER;
                goto fail;
            }
            for (int u = t + 1; u < 3; u++)
                if (fds[u] == fds[t])
                    fds[u] = moved;
            fds[t] = moved;
        }
    }
    for (int t = 0; t < 3; t++) {
        int r = fds[t] == t ? fcntl(t, F_SETFD, 0) : dup2(fds[t], t);
        if (r < 0) {
            a->step = STEP_OTHER;
            goto fail;
        }
    }
    if (chdir(a->cwd) != 0) {
        a->step = STEP_CHDIR;
        goto fail;
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(a->path, a->argv, a->envp);
    a->step = STEP_EXEC;
fail:
    a->err = errno;
    _exit(127);
}

/* A NULL-terminated array of the strings of `held` (a tuple of bytes), or NULL with an
   exception; the strings live as long as `held`. */
static char **
to_array(PyObject *held, const char *what)
{
    Py_ssize_t n = PyTuple_GET_SIZE(held);
    char **out = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(held, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be bytes", what, i);
            PyMem_Free(out);
            return NULL;
        }
        if (PyBytes_AsStringAndSize(item, &out[i], NULL) < 0) {
            PyMem_Free(out); /* ValueError: embedded null byte */
            return NULL;
        }
    }
    return out;
}

static int
fill_set(PyObject *seq, const char *what, int (*add)(void *, long), void *into)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if ((v == -1 && PyErr_Occurred()) || add(into, v) < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s: %ld is out of range", what, v);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static int
add_cpu(void *set, long c)
{
    if (c < 0 || c >= CPU_SETSIZE)
        return -1;
    CPU_SET((int)c, (cpu_set_t *)set);
    return 0;
}

static int
add_signal(void *set, long s)
{
    if (s <= 0 || s >= NSIG)
        return -1;
    return sigaddset((sigset_t *)set, (int)s);
}

static PyObject *
spawn(PyObject *Py_UNUSED(self), PyObject *args)
{
    struct child_args a;
    memset(&a, 0, sizeof a);
    PyObject *argv_o, *env_o, *cpus_o, *sigdef_o;
    if (!PyArg_ParseTuple(args, "yOOy(iii)OO", &a.path, &argv_o, &env_o, &a.cwd, &a.fds[0],
                          &a.fds[1], &a.fds[2], &cpus_o, &sigdef_o))
        return NULL;
    CPU_ZERO(&a.cpus);
    sigemptyset(&a.reset);
    a.bind = cpus_o != Py_None;
    if (a.bind && fill_set(cpus_o, "cpus", add_cpu, &a.cpus) < 0)
        return NULL;
    if (fill_set(sigdef_o, "sigdef", add_signal, &a.reset) < 0)
        return NULL;

    PyObject *argv_t = PySequence_Tuple(argv_o), *env_t = NULL, *result = NULL;
    if (argv_t == NULL)
        return NULL;
    if (PyTuple_GET_SIZE(argv_t) == 0) {
        PyErr_SetString(PyExc_ValueError, "argv must not be empty");
        goto out;
    }
    env_t = PySequence_Tuple(env_o);
    if (env_t == NULL)
        goto out;
    a.argv = to_array(argv_t, "argv");
    if (a.argv == NULL)
        goto out;
    a.envp = to_array(env_t, "env");
    if (a.envp == NULL)
        goto out;

    sigset_t all, old;
    sigfillset(&all);
    pid_t pid;
    int vfork_errno = 0;
    Py_BEGIN_ALLOW_THREADS
    /* no handler may run in the child while it shares this process's memory and stack */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = vfork();
    if (pid == 0)
        child(&a);
    vfork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid > 0 && a.err != 0) { /* it has called _exit: reap it */
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    Py_END_ALLOW_THREADS

    if (pid < 0) {
        errno = vfork_errno;
        PyErr_SetFromErrno(PyExc_OSError);
    }
    else if (a.err != 0 && a.step == STEP_BIND) {
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "is", a.err,
                                              "cannot bind it to its cores");
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
    }
    else if (a.err != 0) {
        PyObject *fn = PyUnicode_DecodeFSDefault(a.step == STEP_CHDIR ? a.cwd : a.path);
        if (fn != NULL) {
            /* OSError(errno, text, filename) becomes FileNotFoundError etc. */
            PyObject *exc = PyObject_CallFunction(PyExc_OSError, "isO", a.err,
                                                  strerror(a.err), fn);
            Py_DECREF(fn);
            if (exc != NULL) {
                PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
                Py_DECREF(exc);
            }
        }
    }
    else
        result = PyLong_FromLong((long)pid);
out:
    PyMem_Free(a.argv);
    PyMem_Free(a.envp);
    Py_XDECREF(argv_t);
    Py_XDECREF(env_t);
    return result;
}


/* ---- start(): the same, without waiting for the exec (x86-64 Linux) -----------------------

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
#if defined(__x86_64__) && defined(__linux__)
#define HAVE_START 1
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

#define START_STACK 16384
#define KSIGSET 8 /* the kernel's sigset_t on x86-64: 64 signals */

struct ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

struct started_args {
    const char *path, *cwd;
    char **argv, **envp;
    int fds[3];
    int bind;
    cpu_set_t cpus;
    unsigned long reset; /* bit s-1: signal s back to its default action */
    volatile int err, step; /* written by the child */
    volatile pid_t tid;     /* non-zero until the child has exec'd or exited */
    char stack[START_STACK] __attribute__((aligned(16)));
};

/* a system call without libc: returns -errno on failure, touches no memory of the caller */
static inline long
raw(long n, long a, long b, long c, long d)
{
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

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

static int CHILD_ATTRS
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
    for (int t = 0; t < 3; t++) { /* as in child(): a descriptor among 0-2 out of place moves up */
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

typedef struct {
    PyObject_HEAD
    struct started_args *a;
    PyObject *argv_t, *env_t; /* hold the strings the child reads */
    pid_t pid;
} Started;

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

static PyTypeObject StartedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "agent._spawn.Started",
    .tp_basicsize = sizeof(Started),
    .tp_dealloc = (destructor)Started_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A child started by start(): its pid, whether it settled, and its error.",
    .tp_methods = Started_methods,
    .tp_getset = Started_getset,
};

static PyObject *
start(PyObject *Py_UNUSED(self), PyObject *args)
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
    s->a = PyMem_RawCalloc(1, sizeof *s->a);
    if (s->a == NULL) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
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

    unsigned long all = ~0UL, old = 0;
    a->tid = 1;
    /* no handler may run in the child before it has reset them (it shares this memory):
       every signal blocked, glibc's own two as well (pthread_sigmask leaves those) */
    raw(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, KSIGSET);
    pid_t pid = clone(started_child, a->stack + START_STACK,
                      CLONE_VM | CLONE_CHILD_CLEARTID | SIGCHLD, a, NULL, NULL, (pid_t *)&a->tid);
    int clone_errno = errno;
    raw(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, KSIGSET);
    if (pid < 0) {
        a->tid = 0;
        errno = clone_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    /* its process group exists before this returns, so that killpg(pid) reaches it even
       before its own setpgid (EACCES: it has exec'd, after making the group itself) */
    setpgid(pid, pid);
    s->pid = pid;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}
#endif /* HAVE_START */

static PyMethodDef methods[] = {
    {"spawn", spawn, METH_VARARGS, "spawn(path, argv, env, cwd, fds, cpus, sigdef) -> pid"},
#ifdef HAVE_START
    {"start", start, METH_VARARGS,
     "start(path, argv, env, cwd, fds, cpus, sigdef) -> Started, without waiting for the exec"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spawn", "Start a process already bound to its cores.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__spawn(void)
{
#ifdef HAVE_START
    if (PyType_Ready(&StartedType) < 0)
        return NULL;
#endif
    return PyModule_Create(&module);
}
