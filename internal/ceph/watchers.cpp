// list_watchers exists only in librados' C++ API; this shim gives the
// adapter one read of an object's watchers without opening the RBD image.
#include <rados/librados.hpp>
#include <cerrno>
#include <cstring>
#include <list>
#include <string>

#include "watchers.h"

extern "C" int rbdfence_list_watchers(rados_ioctx_t io, const char *oid, char *buf, size_t len, size_t *needed) {
	librados::IoCtx ioctx;
	librados::IoCtx::from_rados_ioctx_t(io, ioctx);
	std::list<obj_watch_t> ws;
	int r = ioctx.list_watchers(oid, &ws);
	if (r < 0) {
		return r;
	}
	std::string out;
	for (const auto &w : ws) {
		out += w.addr;
		out += '\t';
		out += std::to_string(w.watcher_id);
		out += '\t';
		out += std::to_string(w.cookie);
		out += '\n';
	}
	*needed = out.size();
	if (out.size() > len) {
		return -ERANGE;
	}
	std::memcpy(buf, out.data(), out.size());
	return static_cast<int>(ws.size());
}
