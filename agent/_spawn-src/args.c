/* agent/_spawn-src/args.c: what spawn(), start() and prepare() (and a LaneThreads' start()) take,
   made into what a child reads: NULL-terminated arrays of C strings, a CPU set, a set of
   signals.  (Prepared before the child exists: it makes only system calls.) */

#include "spawn.h"

#include <sched.h>
#include <signal.h>

/* A NULL-terminated array of the strings of `held` (a tuple of bytes), or NULL with an
   exception; the strings live as long as `held`. */
char **
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

int
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

int
add_cpu(void *set, long c)
{
    if (c < 0 || c >= CPU_SETSIZE)
        return -1;
    CPU_SET((int)c, (cpu_set_t *)set);
    return 0;
}

int
add_signal(void *set, long s)
{
    if (s <= 0 || s >= NSIG)
        return -1;
    return sigaddset((sigset_t *)set, (int)s);
}
