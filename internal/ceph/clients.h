#ifndef RBDFENCE_CLIENTS_H
#define RBDFENCE_CLIENTS_H
#include <stddef.h>
#include <rados/librados.h>
#ifdef __cplusplus
extern "C" {
#endif
// rbdfence_read_objects reads up to maxlen bytes of each of the n objects
// oids[i] in ios[i], asynchronously, window (at least 1) at once. rc[i] is
// the length read or a negative errno; *out (malloc'd, the caller frees it)
// holds the data of the objects read, one after the other. Returns 0 or
// -ENOMEM.
int rbdfence_read_objects(const rados_ioctx_t *ios, const char *const *oids, int n, int window, size_t maxlen, int *rc,
                          char **out, size_t *outlen);
// rbdfence_headers_clients reads, for each of the n objects oids[i] in
// ios[i], the cls lock get_info reply for lock and the watchers, in one
// compound read per object, asynchronously, window (at least 1) at once.
// rc[i] is 0 or a
// negative errno; *locks (malloc'd, the caller frees it) holds the get_info
// replies one after the other, lens[i] bytes each; *out (malloc'd) holds
// "I\taddr\tgid\tcookie\n" watcher lines, I the object's index. Returns 0
// or -ENOMEM.
int rbdfence_headers_clients(const rados_ioctx_t *ios, const char *const *oids, const char *lock, int n, int window,
                             int *rc, int *lens, char **out, size_t *outlen, char **locks, size_t *lockslen);
#ifdef __cplusplus
}
#endif
#endif
