// The reads of `rbdfence check` for many images in two calls: librados'
// asynchronous API (and list_watchers, which exists only in its C++ API)
// keep one round trip per phase for all images, without a blocked OS thread
// per image on the Go side.
#include <rados/librados.hpp>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <thread>
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

extern "C" int rbdfence_read_objects(const rados_ioctx_t *ios, const char *const *oids, int n, size_t maxlen, int *rc, char **out,
                                     size_t *outlen) {
	std::vector<librados::IoCtx> io(n);
	std::vector<librados::bufferlist> bl(n);
	std::vector<librados::AioCompletion *> c(n, nullptr);
	for (int i = 0; i < n; i++) {
		librados::IoCtx::from_rados_ioctx_t(ios[i], io[i]);
		c[i] = librados::Rados::aio_create_completion();
		rc[i] = io[i].aio_read(oids[i], c[i], &bl[i], maxlen, 0);
		if (rc[i] < 0) {
			c[i]->release();
			c[i] = nullptr;
		}
	}
	std::string all;
	for (int i = 0; i < n; i++) {
		if (c[i] != nullptr) {
			c[i]->wait_for_complete();
			rc[i] = c[i]->get_return_value();
			c[i]->release();
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

extern "C" int rbdfence_headers_clients(const rados_ioctx_t *ios, const char *const *oids, const char *lock, int n, int threads,
                                        int *rc, char **out, size_t *outlen) {
	struct header {
		librados::IoCtx io;
		std::unique_ptr<librados::ObjectReadOperation> op;  // alive until its completion
		librados::AioCompletion *c = nullptr;
		std::list<obj_watch_t> ws;
		int wr = 0;
		std::list<librados::locker_t> ls;
		int lr = 0;
	};
	std::vector<header> h(n);
	for (int i = 0; i < n; i++) {
		rc[i] = 0;
		librados::IoCtx::from_rados_ioctx_t(ios[i], h[i].io);
		h[i].op.reset(new librados::ObjectReadOperation);
		h[i].op->list_watchers(&h[i].ws, &h[i].wr);
		h[i].c = librados::Rados::aio_create_completion();
		int r = h[i].io.aio_operate(oids[i], h[i].c, h[i].op.get(), nullptr);
		if (r < 0) {
			rc[i] = r;
			h[i].c->release();
			h[i].c = nullptr;
		}
	}
	std::atomic<int> next{0};
	auto lockers = [&]() {
		for (int i; (i = next++) < n;) {
			int exclusive = 0;
			std::string tag;
			h[i].lr = h[i].io.list_lockers(oids[i], lock, &exclusive, &tag, &h[i].ls);
		}
	};
	std::vector<std::thread> pool;
	for (int t = 1; t < threads && t < n; t++) {
		pool.emplace_back(lockers);
	}
	lockers();
	for (auto &t : pool) {
		t.join();
	}
	std::string all;
	for (int i = 0; i < n; i++) {
		if (h[i].c != nullptr) {
			h[i].c->wait_for_complete();
			int r = h[i].c->get_return_value();
			h[i].c->release();
			if (r < 0) {
				rc[i] = r;
			} else if (h[i].wr < 0) {
				rc[i] = h[i].wr;
			}
		}
		if (rc[i] == 0 && h[i].lr < 0) {
			rc[i] = h[i].lr;
		}
		if (rc[i] < 0) {
			continue;
		}
		const std::string idx = std::to_string(i);
		for (const auto &l : h[i].ls) {
			all += "L\t" + idx + '\t' + l.client + '\t' + l.cookie + '\t' + l.address + '\n';
		}
		for (const auto &w : h[i].ws) {
			all += "W\t" + idx + '\t' + w.addr + '\t' + std::to_string(w.watcher_id) + '\t' + std::to_string(w.cookie) + '\n';
		}
	}
	return give(all, out, outlen);
}
