// list_watchers exists only in librados' C++ API; this shim gives the
// adapter an image header's lockers and watchers in one call and one round
// trip, without opening the RBD image.
#include <rados/librados.hpp>
#include <cerrno>
#include <cstring>
#include <list>
#include <string>
#include <utility>

#include "watchers.h"

static std::string watcher_line(const obj_watch_t &w) {
	std::string out = w.addr;
	out += '\t';
	out += std::to_string(w.watcher_id);
	out += '\t';
	out += std::to_string(w.cookie);
	out += '\n';
	return out;
}

extern "C" int rbdfence_header_clients(rados_ioctx_t io, const char *oid, const char *lock, char *buf, size_t len,
                                       size_t *needed) {
	librados::IoCtx ioctx;
	librados::IoCtx::from_rados_ioctx_t(io, ioctx);
	// The watchers are read asynchronously while the lockers are read: one
	// round trip for both.
	std::list<obj_watch_t> ws;
	int wr = 0;
	librados::ObjectReadOperation op;
	op.list_watchers(&ws, &wr);
	librados::AioCompletion *c = librados::Rados::aio_create_completion();
	int r = ioctx.aio_operate(oid, c, &op, nullptr);
	if (r < 0) {
		c->release();
		return r;
	}
	int exclusive = 0;
	std::string tag;
	std::list<librados::locker_t> ls;
	int lr = ioctx.list_lockers(oid, lock, &exclusive, &tag, &ls);
	c->wait_for_complete();
	r = c->get_return_value();
	c->release();
	if (lr < 0) {
		return lr;
	}
	if (r < 0) {
		return r;
	}
	if (wr < 0) {
		return wr;
	}
	std::string out;
	for (const auto &l : ls) {
		out += "L\t" + l.client + '\t' + l.cookie + '\t' + l.address + '\n';
	}
	for (const auto &w : ws) {
		out += "W\t" + watcher_line(w);
	}
	*needed = out.size();
	if (out.size() > len) {
		return -ERANGE;
	}
	std::memcpy(buf, out.data(), out.size());
	return 0;
}
