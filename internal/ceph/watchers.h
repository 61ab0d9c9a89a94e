#ifndef RBDFENCE_WATCHERS_H
#define RBDFENCE_WATCHERS_H
#include <stddef.h>
#include <rados/librados.h>
#ifdef __cplusplus
extern "C" {
#endif
// rbdfence_header_clients reads an RBD header's lockers of lock (cls lock)
// and its watchers in one round trip and writes "L\tclient\tcookie\taddr\n"
// and "W\taddr\tgid\tcookie\n" lines into buf; returns 0 or a negative errno
// (-ERANGE: buf too small, *needed says how large it must be).
int rbdfence_header_clients(rados_ioctx_t io, const char *oid, const char *lock, char *buf, size_t len, size_t *needed);
#ifdef __cplusplus
}
#endif
#endif
