// librbd is loaded here, on the first lock to break, instead of at start-up:
// linked into the program it and its dependencies (libcryptsetup,
// libdevmapper, libssl, ...) are loaded, relocated and initialised on every
// run, although only breaking a lock needs it (everything else is librados).
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <rbd/librbd.h>

#include "breaklock.h"

static pthread_once_t rbd_once = PTHREAD_ONCE_INIT;
static __typeof__(rbd_open) *p_rbd_open;
static __typeof__(rbd_break_lock) *p_rbd_break_lock;
static __typeof__(rbd_close) *p_rbd_close;
static char rbd_dlerror[512];

static void rbd_load(void) {
	void *h = dlopen("librbd.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(rbd_dlerror, sizeof rbd_dlerror, "%s", dlerror());
		return;
	}
	p_rbd_open = (__typeof__(rbd_open) *)dlsym(h, "rbd_open");
	p_rbd_break_lock = (__typeof__(rbd_break_lock) *)dlsym(h, "rbd_break_lock");
	p_rbd_close = (__typeof__(rbd_close) *)dlsym(h, "rbd_close");
	if (p_rbd_open == NULL || p_rbd_break_lock == NULL || p_rbd_close == NULL) {
		snprintf(rbd_dlerror, sizeof rbd_dlerror, "librbd.so.1 lacks rbd_open, rbd_break_lock or rbd_close");
		p_rbd_open = NULL;
	}
}

int rbdfence_break_lock(rados_ioctx_t io, const char *image, const char *client, const char *cookie,
                        const char **load_error, int *opened) {
	*opened = 0;
	pthread_once(&rbd_once, rbd_load);
	if (p_rbd_open == NULL) {
		*load_error = rbd_dlerror;
		return -ENOSYS;
	}
	rbd_image_t im;
	int r = p_rbd_open(io, image, &im, NULL);
	if (r < 0) {
		return r;
	}
	*opened = 1;
	r = p_rbd_break_lock(im, client, cookie);
	int rc = p_rbd_close(im);
	if (r == 0 && rc < 0) {
		r = rc;
	}
	return r;
}

int rbdfence_librbd_loaded(void) {
	void *h = dlopen("librbd.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (h == NULL) {
		return 0;
	}
	dlclose(h);
	return 1;
}
