/* agent/_spawn-src/spawn.h: what the files of the extension module pilot.agent._spawn share
(private: nothing outside this folder includes it).

The module is built from the files of this folder (pyproject.toml), one concern each:
    module.c         its method table and PyInit__spawn
    args.c           what spawn(), start() and prepare() take, made into what a child reads
    vfork_spawn.c    spawn(): a unit's process bound to its cores before its exec, through
                     vfork (why, and the vfork discipline)
    take_dir.c       take_dir(): a unit's sandbox made of a spare directory with one call
    start.c          start() / prepare() and their handle, Started: the child that sets
                     itself up and execs while the agent goes on (x86-64 Linux)
    clone.c          how that child is made: clone3 (its handlers cleared), else clone
    lanes.c          LaneThreads: what it is for, its protocol, its methods (x86-64 Linux)
    lanes_setup.c    LaneThreads: its threads made (one per core) and stopped, it freed
    lanes_thread.c   LaneThreads: what a lane thread does (reap an exit, start the next)
Here: the structures more than one file reads, raw() (the started child's system call) and
the functions one file defines for another.  Those are not static but hidden (the pragma
below): the module still exports PyInit__spawn alone, and a call from one file to another is
a direct call, as it was between the static functions of one file (with -fPIC a default-
visibility function is called through the PLT, as if it could be interposed). */
#ifndef PILOT_AGENT_SPAWN_H
#define PILOT_AGENT_SPAWN_H

#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>

#include <sched.h>
#include <sys/types.h>

#pragma GCC visibility push(hidden)

enum { STEP_NONE, STEP_BIND, STEP_CHDIR, STEP_EXEC, STEP_OTHER };

/* args.c */
char **to_array(PyObject *held, const char *what);
int fill_set(PyObject *seq, const char *what, int (*add)(void *, long), void *into);
int add_cpu(void *set, long c);
int add_signal(void *set, long s);

/* vfork_spawn.c, take_dir.c */
PyObject *spawn(PyObject *self, PyObject *args);
PyObject *take_dir(PyObject *self, PyObject *args);

/* ---- x86-64 Linux: start() (start.c, clone.c) and LaneThreads (lanes*.c) ---- */
#if defined(__x86_64__) && defined(__linux__)
#define HAVE_START 1
#include <pthread.h>

#define START_STACK 16384
#define KSIGSET 8 /* the kernel's sigset_t on x86-64: 64 signals */

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

typedef struct {
    PyObject_HEAD
    struct started_args *a;
    PyObject *argv_t, *env_t; /* hold the strings the child reads */
    pid_t pid;
} Started;

/* start.c */
extern PyTypeObject StartedType;
int started_child(void *p);
PyObject *start(PyObject *self, PyObject *args);
PyObject *prepare(PyObject *self, PyObject *args);

/* clone.c */
pid_t clone_started(Started *s, int flags, int *pidfd);
PyObject *use_clone3(PyObject *self, PyObject *args);
PyObject *clone3_works(PyObject *self, PyObject *ignored);

/* LaneThreads (what it is for and its protocol: lanes.c) */
#define STOP_SLOT 0xffffffffu
#define CMD_SLOT 0xfffffffeu
#define AHEAD_MAX 1024  /* units queued ahead, at most */
#define SLOT_ENV_MAX 16 /* a slot's own environment entries, at most */

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

/* lanes_thread.c */
void fill_slot(Started *h, struct lslot *s);
void *lane_main(void *p);

/* lanes_setup.c */
PyObject *LaneThreads_new(PyTypeObject *type, PyObject *args, PyObject *kw);
void LaneThreads_stop(LaneThreads *L);
void LaneThreads_dealloc(LaneThreads *L);

/* lanes.c */
extern PyTypeObject LaneThreadsType;
#endif /* HAVE_START */

#pragma GCC visibility pop

#endif /* PILOT_AGENT_SPAWN_H */
