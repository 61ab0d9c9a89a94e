#ifndef RBDFENCE_WATCHERS_H
#define RBDFENCE_WATCHERS_H
#include <stddef.h>
#include <rados/librados.h>
#ifdef __cplusplus
extern "C" {
#endif
// rbdfence_list_watchers writes "addr\tgid\tcookie\n" lines for every watcher
// of oid into buf; returns the count, or a negative errno (-ERANGE: buf too
// small, *needed says how large it must be).
int rbdfence_list_watchers(rados_ioctx_t io, const char *oid, char *buf, size_t len, size_t *needed);
#ifdef __cplusplus
}
#endif
#endif
