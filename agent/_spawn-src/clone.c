/* agent/_spawn-src/clone.c: how the child of a Started handle (start.c) is made: clone3 with
   CLONE_CLEAR_SIGHAND where the kernel takes it, else clone; every signal blocked around it.
   use_clone3() and clone3_works(): which of the two (tests hold both to the same contract).
   x86-64 Linux (HAVE_START). */

#include "spawn.h"

#ifdef HAVE_START
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

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
pid_t
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

/* use_clone3(flag) -> whether it was on: clone3 (and its cleared handlers) when the kernel
   takes it, or the older clone (tests hold both ways to the same contract) */
PyObject *
use_clone3(PyObject *Py_UNUSED(self), PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on))
        return NULL;
    int was = __atomic_exchange_n(&clone3_usable, on, __ATOMIC_RELAXED);
    return PyBool_FromLong(was);
}

/* clone3_works() -> whether units start through clone3: asked of the kernel without making a
   child (a clone3 with too small an argument is refused EINVAL where clone3 exists, ENOSYS
   where it does not, EPERM where a filter refuses it) and as the spawns found it */
PyObject *
clone3_works(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(ignored))
{
    if (__atomic_load_n(&clone3_usable, __ATOMIC_RELAXED)) {
        long r = syscall(SYS_clone3, NULL, 0);
        if (r < 0 && errno != EINVAL)
            __atomic_store_n(&clone3_usable, 0, __ATOMIC_RELAXED);
    }
    return PyBool_FromLong(__atomic_load_n(&clone3_usable, __ATOMIC_RELAXED));
}
#endif /* HAVE_START */
