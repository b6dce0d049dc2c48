/* agent._spawn: start a unit's process already bound to its cores.

os.posix_spawn cannot set a CPU mask, so the agent used to bind each process after the spawn
returned, when the process is already running the dynamic loader on some core.  The kernel
then has to stop it there and move it (a synchronous migration): measured 80-95 us of the
agent's loop per unit on 2 busy cores, on top of the spawn.  Here the child sets its own mask
between vfork and exec, so it is on its cores before the program's first instruction, and the
GIL is let go while the parent waits for the exec, so the agent's other threads run meanwhile.

    spawn(path, argv, env, cwd, fds, cpus, sigdef, search) -> pid
        path    bytes: the program (searched on the PATH of `env`'s caller when `search`)
        argv    list of bytes
        env     list of b"KEY=VALUE"
        cwd     bytes: the directory it starts in
        fds     (stdin, stdout, stderr): descriptors that become 0, 1, 2
        cpus    tuple of core ids to bind it to, or None (it keeps the caller's mask)
        sigdef  tuple of signal numbers reset to their default action (besides every signal
                the caller handles: handlers do not survive an exec anyway, and must not run
                in a child that shares the caller's memory)
        search  whether to search PATH when `path` has no '/' (execvp semantics)
    The child starts in a new process group of its own, with no signal blocked.
    Raises OSError (errno of the failing step, with the path or directory) when the child
    could not be started (it has been reaped then), ValueError for a NUL byte in any string.

The child only makes system calls on memory prepared before vfork (no allocation, no
Python): the same discipline as glibc's posix_spawn, which also uses a vfork-style clone.
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

static char **
to_array(PyObject *seq, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    char **out = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be bytes", what, i);
            goto fail;
        }
        if (PyBytes_AsStringAndSize(item, &out[i], NULL) < 0)
            goto fail; /* ValueError: embedded null byte */
    }
    /* the strings belong to the bytes objects, which the caller's lists keep alive */
    Py_DECREF(fast);
    return out;
fail:
    Py_DECREF(fast);
    PyMem_Free(out);
    return NULL;
}

static PyObject *
spawn(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *path, *cwd;
    PyObject *argv_o, *env_o, *cpus_o, *sigdef_o;
    int fds[3], search;
    if (!PyArg_ParseTuple(args, "yOOy(iii)OOp", &path, &argv_o, &env_o, &cwd, &fds[0],
                          &fds[1], &fds[2], &cpus_o, &sigdef_o, &search))
        return NULL;

    cpu_set_t cpus;
    int bind = cpus_o != Py_None;
    CPU_ZERO(&cpus);
    if (bind) {
        PyObject *fast = PySequence_Fast(cpus_o, "cpus");
        if (fast == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
            long c = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
            if (c < 0 || c >= CPU_SETSIZE) {
                Py_DECREF(fast);
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "cpus: core %ld is out of range", c);
                return NULL;
            }
            CPU_SET((int)c, &cpus);
        }
        Py_DECREF(fast);
    }
    sigset_t reset;
    sigemptyset(&reset);
    PyObject *sfast = PySequence_Fast(sigdef_o, "sigdef");
    if (sfast == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sfast); i++) {
        long s = PyLong_AsLong(PySequence_Fast_GET_ITEM(sfast, i));
        if (s <= 0 || s >= NSIG) {
            Py_DECREF(sfast);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "sigdef: %ld is not a signal", s);
            return NULL;
        }
        sigaddset(&reset, (int)s);
    }
    Py_DECREF(sfast);

    char **argv = to_array(argv_o, "argv");
    if (argv == NULL)
        return NULL;
    if (argv[0] == NULL) {
        PyMem_Free(argv);
        PyErr_SetString(PyExc_ValueError, "argv must not be empty");
        return NULL;
    }
    char **envp = to_array(env_o, "env");
    if (envp == NULL) {
        PyMem_Free(argv);
        return NULL;
    }

    /* written by the child (it shares this memory until it execs or exits) */
    volatile int child_errno = 0;
    volatile int child_step = 0; /* 1: bind, 2: chdir, 3: exec, 4: other */
    sigset_t all, old;
    sigfillset(&all);
    pid_t pid;
    int vfork_errno = 0;

    Py_BEGIN_ALLOW_THREADS
    /* no handler may run in the child while it shares this process's memory and stack */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = vfork();
    if (pid == 0) {
        struct sigaction dfl, cur;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        for (int s = 1; s < NSIG; s++) {
            if (s == SIGKILL || s == SIGSTOP)
                continue;
            if (sigismember(&reset, s)) {
                sigaction(s, &dfl, NULL);
                continue;
            }
            if (sigaction(s, NULL, &cur) == 0 && cur.sa_handler != SIG_IGN &&
                cur.sa_handler != SIG_DFL)
                sigaction(s, &dfl, NULL);
        }
        if (bind && sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
            child_step = 1;
            goto child_fail;
        }
        if (setpgid(0, 0) != 0) {
            child_step = 4;
            goto child_fail;
        }
        for (int t = 0; t < 3; t++) {
            int r = fds[t] == t ? fcntl(t, F_SETFD, 0) : dup2(fds[t], t);
            if (r < 0) {
                child_step = 4;
                goto child_fail;
            }
        }
        if (chdir(cwd) != 0) {
            child_step = 2;
            goto child_fail;
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (search)
            execvpe(path, argv, envp);
        else
            execve(path, argv, envp);
        child_step = 3;
    child_fail:
        child_errno = errno;
        _exit(127);
    }
    vfork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid > 0 && child_errno != 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    Py_END_ALLOW_THREADS

    PyMem_Free(argv);
    PyMem_Free(envp);
    if (pid < 0) {
        errno = vfork_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (child_errno != 0) {
        const char *name = child_step == 2 ? cwd : path;
        PyObject *fn = PyUnicode_DecodeFSDefault(name);
        if (fn == NULL)
            return NULL;
        if (child_step == 1) {
            PyErr_Format(PyExc_OSError, "cannot bind to its cores: %s", strerror(child_errno));
            Py_DECREF(fn);
            return NULL;
        }
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "isO", child_errno,
                                              strerror(child_errno), fn);
        Py_DECREF(fn);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    return PyLong_FromLong((long)pid);
}

static PyMethodDef methods[] = {
    {"spawn", spawn, METH_VARARGS, "spawn(path, argv, env, cwd, fds, cpus, sigdef, search) -> pid"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spawn", "Start a process already bound to its cores.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__spawn(void)
{
    return PyModule_Create(&module);
}
