// floor: the least a program can do to answer what `rbdfence check` answers,
// used by test/bench/checkbench as a second baseline ("the floor"). One
// librados connection; every image's rbd_id.<name> is read asynchronously at
// once, then every header's rbd_lock holders (cls lock get_info) and watchers
// (list_watchers) are read asynchronously at once. It prints one line per
// image (lockers, watchers) and exits non-zero on any error. No librbd, no
// config file, no logging: only what the answer needs.
//
//   floor --mon-host H --id USER --keyring FILE POOL/IMAGE...
//
// Built by checkbench: g++ -O2 -std=c++17 floor.cc -lrados
#include <rados/librados.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <list>
#include <string>
#include <vector>

namespace {

struct Image {
	std::string pool, name, id;
	librados::IoCtx *io = nullptr;
	librados::bufferlist idbl, lockin, lockout;
	std::list<obj_watch_t> watchers;
	int watchrv = 0;
	librados::AioCompletion *c1 = nullptr, *c2 = nullptr, *c3 = nullptr;
};

// le32 reads a little-endian uint32 at p.
uint32_t le32(const char *p) {
	const auto *u = reinterpret_cast<const unsigned char *>(p);
	return uint32_t(u[0]) | uint32_t(u[1]) << 8 | uint32_t(u[2]) << 16 | uint32_t(u[3]) << 24;
}

void putle32(librados::bufferlist &bl, uint32_t v) {
	char b[4] = {char(v), char(v >> 8), char(v >> 16), char(v >> 24)};
	bl.append(b, 4);
}

// lockInput encodes cls_lock_get_info_op{name}: ENCODE_START(1, 1), string.
librados::bufferlist lockInput(const std::string &name) {
	librados::bufferlist bl;
	char hdr[2] = {1, 1};
	bl.append(hdr, 2);
	putle32(bl, uint32_t(4 + name.size()));
	putle32(bl, uint32_t(name.size()));
	bl.append(name.data(), name.size());
	return bl;
}

int fail(const char *what, const std::string &obj, int r) {
	std::fprintf(stderr, "floor: %s %s: %s\n", what, obj.c_str(), std::strerror(-r));
	return 1;
}

}  // namespace

int main(int argc, char **argv) {
	std::string mon, id = "admin", keyring;
	std::vector<Image> imgs;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		if ((a == "--mon-host" || a == "--id" || a == "--keyring") && i + 1 < argc) {
			(a == "--mon-host" ? mon : a == "--id" ? id : keyring) = argv[++i];
			continue;
		}
		auto slash = a.find('/');
		if (slash == std::string::npos || a[0] == '-') {
			std::fprintf(stderr, "usage: floor --mon-host H --id USER --keyring FILE POOL/IMAGE...\n");
			return 2;
		}
		Image im;
		im.pool = a.substr(0, slash);
		im.name = a.substr(slash + 1);
		imgs.push_back(im);
	}
	librados::Rados rados;
	int r = rados.init2(("client." + id).c_str(), "ceph", 0);
	if (r < 0) return fail("init", id, r);
	const char *opts[][2] = {{"mon_host", mon.c_str()}, {"keyring", keyring.c_str()},
	                         {"log_to_stderr", "false"}, {"err_to_stderr", "false"}, {"log_file", ""}};
	for (auto &o : opts) {
		if (*o[1] == '\0' && std::strcmp(o[0], "log_file") != 0) continue;
		if ((r = rados.conf_set(o[0], o[1])) < 0) return fail("conf_set", o[0], r);
	}
	if ((r = rados.connect()) < 0) return fail("connect", mon, r);

	std::list<librados::IoCtx> ioctxs;  // one per pool
	std::vector<std::string> pools;
	for (auto &im : imgs) {
		size_t k = 0;
		auto it = ioctxs.begin();
		for (; k < pools.size() && pools[k] != im.pool; k++, ++it) {
		}
		if (k == pools.size()) {
			ioctxs.emplace_back();
			if ((r = rados.ioctx_create(im.pool.c_str(), ioctxs.back())) < 0) return fail("pool", im.pool, r);
			pools.push_back(im.pool);
			it = std::prev(ioctxs.end());
		}
		im.io = &*it;
	}
	// 1. Every rbd_id.<name> at once.
	for (auto &im : imgs) {
		im.c1 = librados::Rados::aio_create_completion();
		if ((r = im.io->aio_read("rbd_id." + im.name, im.c1, &im.idbl, 512, 0)) < 0) return fail("read", "rbd_id." + im.name, r);
	}
	for (auto &im : imgs) {
		im.c1->wait_for_complete();
		r = im.c1->get_return_value();
		im.c1->release();
		if (r < 0) return fail("read", "rbd_id." + im.name, r);
		std::string s = im.idbl.to_str();
		if (s.size() < 4 || le32(s.data()) > s.size() - 4) return fail("decode", "rbd_id." + im.name, -EINVAL);
		im.id = s.substr(4, le32(s.data()));
	}
	// 2. Every header's lockers and watchers at once.
	for (auto &im : imgs) {
		std::string header = "rbd_header." + im.id;
		im.lockin = lockInput("rbd_lock");
		im.c2 = librados::Rados::aio_create_completion();
		if ((r = im.io->aio_exec(header, im.c2, "lock", "get_info", im.lockin, &im.lockout)) < 0) return fail("get_info", header, r);
		librados::ObjectReadOperation op;
		op.list_watchers(&im.watchers, &im.watchrv);
		im.c3 = librados::Rados::aio_create_completion();
		if ((r = im.io->aio_operate(header, im.c3, &op, nullptr)) < 0) return fail("list_watchers", header, r);
	}
	for (auto &im : imgs) {
		im.c2->wait_for_complete();
		im.c3->wait_for_complete();
		int r2 = im.c2->get_return_value(), r3 = im.c3->get_return_value();
		im.c2->release();
		im.c3->release();
		if (r2 < 0) return fail("get_info", im.name, r2);
		if (r3 < 0 || im.watchrv < 0) return fail("list_watchers", im.name, r3 < 0 ? r3 : im.watchrv);
		// cls_lock_get_info_reply: ENCODE_START (6 bytes), then the lockers map's size.
		std::string s = im.lockout.to_str();
		if (s.size() < 10) return fail("decode", "get_info of " + im.name, -EINVAL);
		std::printf("%s/%s\tlockers %u\twatchers %zu\n", im.pool.c_str(), im.name.c_str(), le32(s.data() + 6), im.watchers.size());
	}
	ioctxs.clear();
	rados.shutdown();
	return 0;
}
