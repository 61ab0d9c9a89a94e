// The reads of `rbdfence check` for many images in two calls: librados'
// asynchronous API (and list_watchers, which exists only in its C++ API)
// keeps one round trip per phase for all images, without a blocked OS thread
// per image on the Go side.
#include <rados/librados.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "clients.h"

namespace {

int give(const std::string &s, char **out, size_t *outlen) {
	char *p = static_cast<char *>(std::malloc(s.size() + 1));
	if (p == nullptr) {
		return -ENOMEM;
	}
	std::memcpy(p, s.data(), s.size());
	p[s.size()] = '\0';
	*out = p;
	*outlen = s.size();
	return 0;
}

}  // namespace

extern "C" int rbdfence_read_objects(const rados_ioctx_t *ios, const char *const *oids, int n, int window, size_t maxlen, int *rc,
                                     char **out, size_t *outlen) {
	std::vector<librados::IoCtx> io(n);
	std::vector<librados::bufferlist> bl(n);
	std::vector<librados::AioCompletion *> c(n, nullptr);
	auto submit = [&](int i) {
		librados::IoCtx::from_rados_ioctx_t(ios[i], io[i]);
		c[i] = librados::Rados::aio_create_completion();
		rc[i] = io[i].aio_read(oids[i], c[i], &bl[i], maxlen, 0);
		if (rc[i] < 0) {
			c[i]->release();
			c[i] = nullptr;
		}
	};
	for (int i = 0; i < n && i < window; i++) {
		submit(i);
	}
	std::string all;
	for (int i = 0; i < n; i++) {
		if (c[i] != nullptr) {
			c[i]->wait_for_complete();
			rc[i] = c[i]->get_return_value();
			c[i]->release();
		}
		if (i + window < n) {  // at most window reads in flight
			submit(i + window);
		}
		if (rc[i] >= 0) {
			rc[i] = static_cast<int>(bl[i].length());
			if (bl[i].length() > 0) {
				all.append(bl[i].c_str(), bl[i].length());
			}
		}
	}
	return give(all, out, outlen);
}

extern "C" int rbdfence_headers_clients(const rados_ioctx_t *ios, const char *const *oids, const char *lock, int n, int window,
                                        int *rc, int *lens, char **out, size_t *outlen, char **locks, size_t *lockslen) {
	// cls_lock_get_info_op{name}: ENCODE_START(1, 1), then the name.
	librados::bufferlist in;
	const uint32_t nlen = std::strlen(lock);
	const uint32_t slen = 4 + nlen;
	const char hdr[10] = {1, 1, char(slen), char(slen >> 8), char(slen >> 16), char(slen >> 24),
	                      char(nlen), char(nlen >> 8), char(nlen >> 16), char(nlen >> 24)};
	in.append(hdr, sizeof hdr);
	in.append(lock, nlen);
	struct header {
		librados::IoCtx io;
		std::unique_ptr<librados::ObjectReadOperation> op;  // alive until its completion
		librados::AioCompletion *c = nullptr;
		librados::bufferlist in, info;
		int ir = 0;
		std::list<obj_watch_t> ws;
		int wr = 0;
	};
	std::vector<header> h(n);
	auto submit = [&](int i) {
		rc[i] = 0;
		librados::IoCtx::from_rados_ioctx_t(ios[i], h[i].io);
		h[i].in = in;
		h[i].op.reset(new librados::ObjectReadOperation);
		h[i].op->exec("lock", "get_info", h[i].in, &h[i].info, &h[i].ir);
		h[i].op->list_watchers(&h[i].ws, &h[i].wr);
		h[i].c = librados::Rados::aio_create_completion();
		int r = h[i].io.aio_operate(oids[i], h[i].c, h[i].op.get(), nullptr);
		if (r < 0) {
			rc[i] = r;
			h[i].c->release();
			h[i].c = nullptr;
		}
	};
	for (int i = 0; i < n && i < window; i++) {
		submit(i);
	}
	std::string text, bin;
	for (int i = 0; i < n; i++) {
		lens[i] = 0;
		if (h[i].c != nullptr) {
			h[i].c->wait_for_complete();
			int r = h[i].c->get_return_value();
			h[i].c->release();
			rc[i] = r < 0 ? r : h[i].ir < 0 ? h[i].ir : h[i].wr < 0 ? h[i].wr : 0;
		}
		if (i + window < n) {  // at most window headers in flight
			submit(i + window);
		}
		if (rc[i] < 0) {
			continue;
		}
		lens[i] = static_cast<int>(h[i].info.length());
		if (h[i].info.length() > 0) {
			bin.append(h[i].info.c_str(), h[i].info.length());
		}
		const std::string idx = std::to_string(i);
		for (const auto &w : h[i].ws) {
			text += idx + '\t' + w.addr + '\t' + std::to_string(w.watcher_id) + '\t' + std::to_string(w.cookie) + '\n';
		}
	}
	if (give(bin, locks, lockslen) < 0) {
		return -ENOMEM;
	}
	if (give(text, out, outlen) < 0) {
		std::free(*locks);
		*locks = nullptr;
		return -ENOMEM;
	}
	return 0;
}
