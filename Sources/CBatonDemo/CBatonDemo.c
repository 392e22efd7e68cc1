#include "CBatonDemo.h"

#include <errno.h>
#include <string.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>
#elif defined(__APPLE__)
#include <pthread.h>
#include <sys/mount.h>
#include <sys/param.h>
#endif

int baton_demo_file_system(int descriptor, unsigned long long *magic, char *name, size_t name_size) {
    if (name_size > 0) name[0] = 0;
    *magic = 0;
#if defined(__linux__)
    struct statfs status;
    if (fstatfs(descriptor, &status) != 0) return -1;
    *magic = (unsigned long long)status.f_type;
    return 0;
#elif defined(__APPLE__)
    struct statfs status;
    if (fstatfs(descriptor, &status) != 0) return -1;
    if (name_size > 0) {
        strncpy(name, status.f_fstypename, name_size - 1);
        name[name_size - 1] = 0;
    }
    return 0;
#else
    (void)descriptor;
    errno = ENOSYS;
    return -1;
#endif
}

long long baton_demo_thread_id(void) {
#if defined(__linux__)
    return (long long)syscall(SYS_gettid);
#elif defined(__APPLE__)
    unsigned long long id = 0;
    pthread_threadid_np(NULL, &id);
    return (long long)id;
#else
    return -1;
#endif
}

long baton_demo_read_syscall_number(void) {
#if defined(__linux__)
    return SYS_read;
#else
    return -1;
#endif
}
