/* agent/_spawn-src/module.c: the module pilot.agent._spawn: its method table and PyInit__spawn
   (with LaneThreads, AHEAD_MAX and SLOT_ENV_MAX where there is start(): x86-64 Linux).  Which
   file holds what: spawn.h. */

#include "spawn.h"

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
