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
#include <stddef.h>
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


/* ---- take_dir(): a unit's sandbox made of a spare (agent/runners/spares.py) -----------------

    take_dir(spare, path, mode) -> 0       spare renamed to path
                                   1       spare is not fit to serve: it holds a subdirectory
                                           (st_nlink is not 2) or its mode is not `mode`
                                           (-1: any)
                                   2       something is in it: left as it is
                                   -errno  a step failed: the stat or the read of spare, or
                                           the rename (EEXIST, ENOTEMPTY: path is there)
The checks and the rename in one call, without the interpreter: in Python they were three
calls, a stat result and a list per unit, and listdir's opendir adds an fstat of its own. */
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>

struct dirent64_k { /* the kernel's linux_dirent64 */
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* 1: nothing but . and .. in it, 0: something, -errno */
static int
dir_is_empty(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[1024] __attribute__((aligned(8)));
    int result = 1;
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n < 0) {
            result = -errno;
            break;
        }
        if (n == 0)
            break;
        for (long off = 0; off < n && result == 1;) {
            const struct dirent64_k *d = (const void *)(buf + off);
            const char *nm = d->name;
            if (!(nm[0] == '.' && (nm[1] == 0 || (nm[1] == '.' && nm[2] == 0))))
                result = 0;
            off += d->reclen;
        }
        if (result != 1)
            break;
    }
    close(fd);
    return result;
}

static PyObject *
take_dir(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *spare_o, *path_o;
    int mode;
    if (!PyArg_ParseTuple(args, "O&O&i", PyUnicode_FSConverter, &spare_o, PyUnicode_FSConverter,
                          &path_o, &mode))
        return NULL;
    const char *spare = PyBytes_AS_STRING(spare_o), *path = PyBytes_AS_STRING(path_o);
    long r;
    Py_BEGIN_ALLOW_THREADS
    struct stat st;
    if (stat(spare, &st) < 0)
        r = -errno;
    else if (st.st_nlink != 2 || (mode >= 0 && (int)(st.st_mode & 07777) != mode))
        r = 1;
    else {
        int empty = dir_is_empty(spare);
        if (empty < 0)
            r = empty;
        else if (empty == 0)
            r = 2;
        else
            r = rename(spare, path) < 0 ? -errno : 0;
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(spare_o);
    Py_DECREF(path_o);
    return PyLong_FromLong(r);
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
    int cleared;            /* the clone reset every handled signal (CLONE_CLEAR_SIGHAND) */
    volatile int err, step; /* written by the child */
    volatile pid_t tid;     /* non-zero until the child has exec'd or exited */
    unsigned nenv;          /* (a lane's handle) its own entries of envp, before its slot's */
    int room;               /* envp has room for a slot's entries (make_room) */
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

/* clone3 (Linux 5.5+) with CLONE_CLEAR_SIGHAND: the kernel resets every handled signal of the
   child to its default as it creates it, where the child would otherwise look up and reset
   each of the 64 itself (measured: 7 us of a 50 us spawn).  glibc has no wrapper that runs a
   function on a new stack, so this is one: in the child (rax 0, on the new stack) it calls
   fn(arg) and exits with what it returns.  Returns the pid or -errno in the parent. */
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef CLONE_CLEAR_SIGHAND
#define CLONE_CLEAR_SIGHAND 0x100000000ULL
#endif

struct clone3_args { /* the kernel's struct clone_args, its first version (64 bytes) */
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static long __attribute__((noinline))
clone3_run(struct clone3_args *cl, int (*fn)(void *), void *arg)
{
    long ret;
    register int (*f)(void *) __asm__("r12") = fn;
    register void *x __asm__("r13") = arg;
    __asm__ volatile("syscall\n\t"
                     "test %%rax, %%rax\n\t"
                     "jnz 1f\n\t"
                     "xor %%ebp, %%ebp\n\t" /* the child: a fresh frame chain */
                     "mov %%r13, %%rdi\n\t"
                     "call *%%r12\n\t"
                     "mov %%eax, %%edi\n\t"
                     "mov $60, %%eax\n\t" /* SYS_exit */
                     "syscall\n\t"
                     "hlt\n"
                     "1:"
                     : "=a"(ret)
                     : "a"((long)SYS_clone3), "D"(cl), "S"(sizeof *cl), "r"(f), "r"(x)
                     : "rcx", "r11", "memory");
    return ret;
}

static int clone3_usable = 1; /* cleared for good when the kernel (or a filter) refuses it */

/* clone the child of a prepared handle; `flags` adds the exit signal (SIGCHLD, or 0 for a
   lane's child: until its exec, which sets SIGCHLD, only a wait with __WALL sees it) and
   CLONE_PIDFD.  Every signal is blocked
   around the clone: no handler may run in the child before it has reset them (it shares this
   memory), glibc's own two as well (pthread_sigmask leaves those).  Returns the pid or -errno. */
static pid_t
clone_started(Started *s, int flags, int *pidfd)
{
    struct started_args *a = s->a;
    unsigned long all = ~0UL, old = 0;
    a->tid = 1;
    a->err = 0;
    a->step = STEP_NONE;
    raw(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, KSIGSET);
    pid_t pid = -ENOSYS;
    if (__atomic_load_n(&clone3_usable, __ATOMIC_RELAXED)) {
        struct clone3_args cl = {
            .flags = CLONE_VM | CLONE_CHILD_CLEARTID | CLONE_CLEAR_SIGHAND |
                     (unsigned long long)(flags & ~0xff),
            .pidfd = (unsigned long long)(uintptr_t)pidfd,
            .child_tid = (unsigned long long)(uintptr_t)&a->tid,
            .exit_signal = (unsigned long long)(flags & 0xff),
            .stack = (unsigned long long)(uintptr_t)a->stack,
            .stack_size = START_STACK,
        };
        a->cleared = 1;
        pid = (pid_t)clone3_run(&cl, started_child, a);
        if (pid == -ENOSYS || pid == -EINVAL || pid == -EPERM) /* too old, or filtered */
            __atomic_store_n(&clone3_usable, 0, __ATOMIC_RELAXED);
    }
    if (!__atomic_load_n(&clone3_usable, __ATOMIC_RELAXED)) {
        a->cleared = 0;
        pid = clone(started_child, a->stack + START_STACK, CLONE_VM | CLONE_CHILD_CLEARTID | flags,
                    a, pidfd, NULL, (pid_t *)&a->tid);
        if (pid < 0)
            pid = -errno;
    }
    raw(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, KSIGSET);
    if (pid < 0) {
        a->tid = 0;
        return pid;
    }
    /* its process group exists before this returns, so that killpg(pid) reaches it even
       before its own setpgid (EACCES: it has exec'd, after making the group itself) */
    setpgid(pid, pid);
    s->pid = pid;
    return pid;
}

static PyObject *
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

static PyObject *
prepare(PyObject *Py_UNUSED(self), PyObject *args)
{
    return (PyObject *)build_started(args);
}

/* use_clone3(flag) -> whether it was on: clone3 (and its cleared handlers) when the kernel
   takes it, or the older clone (tests hold both ways to the same contract) */
static PyObject *
use_clone3(PyObject *Py_UNUSED(self), PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on))
        return NULL;
    int was = __atomic_exchange_n(&clone3_usable, on, __ATOMIC_RELAXED);
    return PyBool_FromLong(was);
}

/* ---- LaneThreads: the next unit started on a freed core the moment the one before it exits ----

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
    withdraw()           take back every unit ahead that has not started: their seqs, in order
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
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#define STOP_SLOT 0xffffffffu
#define CMD_SLOT 0xfffffffeu
#define AHEAD_MAX 1024  /* units queued ahead, at most */
#define SLOT_ENV_MAX 16 /* a slot's own environment entries, at most */
#define SAID_MAX 64     /* starts tried after one exit (each that fails lets the next try) */

struct lslot {
    pid_t pid;       /* its running unit, 0: none */
    int pidfd;
    int out, err;    /* a start()'s read ends, until start() returns */
    Started *cur;    /* (refs held by the lane threads) */
    Started *next;   /* a start()'s handle, until the thread started it */
    int now;         /* next is to start at once (start()), not at the exit */
    int starting;    /* the thread is starting a unit here (without mu) */
    pid_t result;    /* of a start(): its pid or -errno */
    unsigned worker; /* the thread that starts its units (the one on its core) */
    int key;         /* the shape of its allocation (start()'s) */
    PyObject *env_t; /* its own environment entries (bytes), and pointers into them */
    char *env[SLOT_ENV_MAX];
    unsigned nenv;
    int bind;        /* its units are bound to cpus */
    cpu_set_t cpus;
};

struct lahead {      /* a unit queued ahead */
    Started *h;
    PyObject *line;  /* bytes: its journal line */
    int key;
    unsigned long long seq;
};

struct lrec {
    int start;       /* 0: exit, 1: start */
    unsigned slot;
    pid_t pid;
    int value;       /* exit: code (negative: signal); start: errno */
    int out, err;    /* start: the read ends of its stdout and stderr pipes (the same pipe
                        when it was given one for both), the agent's from now on */
    double at;       /* when (the epoch, as time.time()) */
    unsigned long long seq; /* start: the follow()'s */
    PyObject *drop[2]; /* refs the thread let go of, released in take() */
};

struct lworker;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t started;
    int running;
    int ready, stop, journal;
    unsigned nslots, nworkers;
    struct lslot *slots;
    struct lworker *workers;
    struct lahead *ahead; /* a ring of AHEAD_MAX: `an` from index `ah` */
    unsigned ah, an;
    struct lrec *recs;
    size_t nrecs, caprecs;
    unsigned long pushed; /* records ever pushed (take() empties recs meanwhile) */
} LaneThreads;

/* a lane thread: the slots of one core (or, past MAX_WORKERS cores, of a few) */
struct lworker {
    LaneThreads *L;
    unsigned index;
    pthread_t thread;
    int ep, cmd;     /* its epoll (its slots' pidfds, stop, cmd), and start()'s wake-up */
    int made;        /* its thread exists */
    int bind;
    cpu_set_t cpus;  /* where it runs: its slots' cores */
};

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

/* (mu held, or the handle not shared yet) handle `h` as slot `s` starts it: the slot's
   environment entries after its own, and the slot's cores */
static void
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

static void *
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

static void LaneThreads_stop(LaneThreads *L);

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

static PyObject *
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
    /* the threads take no signal (they are the interpreter's; SIGCHLD when quiet: see above),
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

static void
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

static void
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
LaneThreads_withdraw(LaneThreads *L, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&L->mu);
    unsigned n = L->an, ah = L->ah;
    struct lahead *back = n ? malloc(n * sizeof *back) : NULL;
    if (n && back == NULL) {
        pthread_mutex_unlock(&L->mu);
        return PyErr_NoMemory();
    }
    for (unsigned k = 0; k < n; k++)
        back[k] = L->ahead[(ah + k) % AHEAD_MAX];
    L->an = 0;
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
    {"withdraw", (PyCFunction)LaneThreads_withdraw, METH_NOARGS,
     "withdraw() -> [seq]: take back the units ahead that have not started, in order."},
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

static PyTypeObject LaneThreadsType = {
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


#ifdef HAVE_START
/* clone3_works() -> whether units start through clone3: asked of the kernel without making a
   child (a clone3 with too small an argument is refused EINVAL where clone3 exists, ENOSYS
   where it does not, EPERM where a filter refuses it) and as the spawns found it */
static PyObject *
clone3_works(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(ignored))
{
    if (__atomic_load_n(&clone3_usable, __ATOMIC_RELAXED)) {
        long r = syscall(SYS_clone3, NULL, 0);
        if (r < 0 && errno != EINVAL)
            __atomic_store_n(&clone3_usable, 0, __ATOMIC_RELAXED);
    }
    return PyBool_FromLong(__atomic_load_n(&clone3_usable, __ATOMIC_RELAXED));
}
#endif

static PyMethodDef methods[] = {
    {"spawn", spawn, METH_VARARGS, "spawn(path, argv, env, cwd, fds, cpus, sigdef) -> pid"},
    {"take_dir", take_dir, METH_VARARGS,
     "take_dir(spare, path, mode) -> 0 renamed, 1 unfit, 2 not empty, -errno"},
#ifdef HAVE_START
    {"start", start, METH_VARARGS,
     "start(path, argv, env, cwd, fds, cpus, sigdef) -> Started, without waiting for the exec"},
    {"prepare", prepare, METH_VARARGS,
     "prepare(path, argv, env, cwd, fds, cpus, sigdef) -> Started, not started: for a LaneThreads"},
    {"clone3_works", clone3_works, METH_NOARGS,
     "clone3_works() -> bool: whether units start through clone3 (else clone)."},
    {"use_clone3", use_clone3, METH_VARARGS,
     "use_clone3(flag) -> bool: clone3 where the kernel takes it (True), or the old clone"},
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
    if (PyType_Ready(&StartedType) < 0 || PyType_Ready(&LaneThreadsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LaneThreadsType);
    if (PyModule_AddIntConstant(m, "AHEAD_MAX", AHEAD_MAX) < 0 ||
        PyModule_AddIntConstant(m, "SLOT_ENV_MAX", SLOT_ENV_MAX) < 0 ||
        PyModule_AddObject(m, "LaneThreads", (PyObject *)&LaneThreadsType) < 0) {
        Py_DECREF(&LaneThreadsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
#else
    return PyModule_Create(&module);
#endif
}
