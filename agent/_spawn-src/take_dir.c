/* agent/_spawn-src/take_dir.c: take_dir(), a unit's sandbox made of a spare
(agent/runners/spares.py)

    take_dir(spare, path, mode) -> 0       spare renamed to path
                                   1       spare is not fit to serve: it holds a subdirectory
                                           (st_nlink is not 2) or its mode is not `mode`
                                           (-1: any)
                                   2       something is in it: left as it is
                                   -errno  a step failed: the stat or the read of spare, or
                                           the rename (EEXIST, ENOTEMPTY: path is there)
The checks and the rename in one call, without the interpreter: in Python they were three
calls, a stat result and a list per unit, and listdir's opendir adds an fstat of its own. */

#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

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

PyObject *
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
