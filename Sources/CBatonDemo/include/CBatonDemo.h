// System facts the demo needs that Swift's C overlays do not import on every platform: the type of
// the file system a descriptor is on (Linux's <sys/vfs.h> is not in Glibc's module), and the calling
// thread's kernel id with the number of the read system call (for tests that watch a blocked read).
#ifndef C_BATON_DEMO_H
#define C_BATON_DEMO_H

#include <stddef.h>

/// The type of the file system that `descriptor` is on: on Linux its magic number (`statfs`'s
/// `f_type`) with `name` set to the empty string; on Apple platforms its type name (`f_fstypename`)
/// with `magic` set to 0. Returns 0, or -1 with `errno` set.
int baton_demo_file_system(int descriptor, unsigned long long *magic, char *name, size_t name_size);

/// The calling thread's id as the kernel knows it (Linux: `gettid`), or -1 where there is none.
long long baton_demo_thread_id(void);

/// The number of the `read` system call as `/proc/<pid>/task/<tid>/syscall` shows it (Linux), or -1.
long baton_demo_read_syscall_number(void);

#endif
