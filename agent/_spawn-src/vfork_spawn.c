/* agent/_spawn-src/vfork_spawn.c: spawn(), a unit's process started already bound to its cores,
through vfork (off x86-64 Linux the module's only way; start.c has one that does not wait for
the exec).

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

#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

PyObject *
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
