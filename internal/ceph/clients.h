#ifndef RBDFENCE_CLIENTS_H
#define RBDFENCE_CLIENTS_H
#include <stddef.h>
#include <rados/librados.h>
#ifdef __cplusplus
extern "C" {
#endif
// rbdfence_read_objects reads up to maxlen bytes of each of the n objects
// oids[i] in ios[i], all asynchronously at once. rc[i] is the length read or
// a negative errno; *out (malloc'd, the caller frees it) holds the data of
// the objects read, one after the other. Returns 0 or -ENOMEM.
int rbdfence_read_objects(const rados_ioctx_t *ios, const char *const *oids, int n, size_t maxlen, int *rc, char **out,
                          size_t *outlen);
// rbdfence_headers_clients reads the holders of lock (cls lock) and the
// watchers of each of the n objects oids[i] in ios[i]: every watcher list
// asynchronously at once, the lockers (librados has no asynchronous
// list_lockers) on min(n, threads) threads. rc[i] is 0 or a negative errno;
// *out (malloc'd, the caller frees it) holds "L\tI\tclient\tcookie\taddr\n"
// and "W\tI\taddr\tgid\tcookie\n" lines, I the object's index. Returns 0 or
// -ENOMEM.
int rbdfence_headers_clients(const rados_ioctx_t *ios, const char *const *oids, const char *lock, int n, int threads,
                             int *rc, char **out, size_t *outlen);
#ifdef __cplusplus
}
#endif
#endif
