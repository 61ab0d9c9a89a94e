#ifndef RBDFENCE_BREAKLOCK_H
#define RBDFENCE_BREAKLOCK_H
#include <rados/librados.h>
// rbdfence_break_lock opens image on io with librbd (loaded on first use),
// breaks the lock (client, cookie) as rbd_break_lock does and closes the
// image. Returns 0 or a negative errno; -ENOSYS with *load_error set when
// librbd cannot be loaded; *opened says whether the image was opened (an
// error after that is rbd_break_lock's).
int rbdfence_break_lock(rados_ioctx_t io, const char *image, const char *client, const char *cookie,
                        const char **load_error, int *opened);
// rbdfence_librbd_loaded reports whether librbd is in the process (tests).
int rbdfence_librbd_loaded(void);
#endif
