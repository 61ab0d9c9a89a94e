//go:build cgo

package ceph

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// decodeLockInfo decodes a cls lock get_info reply (cls_lock_get_info_reply:
// the lockers map, the lock type and the tag) into the holders, as librados'
// list_lockers prints them: client "client.4101", the cookie, the address
// "ip:port/nonce". Both address encodings are read: the msgr2-era one
// (marker 1, versioned, with the address type) and the legacy one (a zero
// marker word, nonce, 128-byte sockaddr_storage with a big-endian family).
func decodeLockInfo(b []byte) ([]rawLocker, error) {
	d := &decoder{b: b}
	end := d.start()
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(b)) {
		d.fail("%d lockers in %d bytes", n, len(b))
	}
	var out []rawLocker
	for i := uint32(0); i < n && d.err == nil; i++ {
		// locker_id_t: entity_name_t (type, num), cookie.
		kend := d.start()
		typ, num := d.u8(), d.u64()
		cookie := d.str()
		d.seek(kend)
		// locker_info_t: expiration (utime_t), address, description.
		vend := d.start()
		d.skip(8)
		addr := d.addr()
		d.seek(vend)
		if d.err == nil {
			out = append(out, rawLocker{client: entityType(typ) + "." + strconv.FormatUint(num, 10), cookie: cookie, addr: addr})
		}
	}
	d.seek(end)
	if d.err != nil {
		return nil, fmt.Errorf("lock info reply: %w", d.err)
	}
	return out, nil
}

// entityType names an entity_name_t type as Ceph prints it.
func entityType(t uint8) string {
	switch t {
	case 0x01:
		return "mon"
	case 0x02:
		return "mds"
	case 0x04:
		return "osd"
	case 0x08:
		return "client"
	case 0x10:
		return "mgr"
	case 0x20:
		return "auth"
	}
	return "unknown"
}

var errShort = errors.New("truncated")

// decoder reads Ceph's little-endian encoding; the first error sticks.
type decoder struct {
	b   []byte
	p   int
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, a...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.p {
		d.err = errShort
		return nil
	}
	v := d.b[d.p : d.p+n]
	d.p += n
	return v
}

func (d *decoder) skip(n int) { d.take(n) }

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) str() string {
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)-d.p) {
		d.err = errShort
	}
	return string(d.take(int(n)))
}

// start reads an ENCODE_START header (version, compat, length) and returns
// where the struct ends.
func (d *decoder) start() int {
	d.skip(2)
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)-d.p) {
		d.err = errShort
	}
	return d.p + int(n)
}

// seek moves to the end of a struct (skipping fields of newer versions).
func (d *decoder) seek(end int) {
	if d.err == nil && end < d.p {
		d.fail("struct overrun at byte %d", d.p)
		return
	}
	d.skip(end - d.p)
}

// addr decodes an entity_addr_t as "ip:port/nonce".
func (d *decoder) addr() string {
	var nonce uint32
	var sa []byte
	var family uint16
	switch marker := d.u8(); marker {
	case 1:
		end := d.start()
		d.skip(4) // type: legacy, msgr2, any
		nonce = d.u32()
		sa = d.take(int(d.u32()))
		if len(sa) >= 2 {
			family = binary.LittleEndian.Uint16(sa)
		}
		d.seek(end)
	case 0:
		d.skip(3) // the rest of the zero type word
		nonce = d.u32()
		sa = d.take(128)
		if len(sa) >= 2 {
			family = binary.BigEndian.Uint16(sa)
		}
	default:
		d.fail("address marker %d", marker)
	}
	if d.err != nil {
		return ""
	}
	var ap netip.AddrPort
	switch {
	case len(sa) == 0: // blank address
		return "-"
	case family == 2 && len(sa) >= 8: // AF_INET: port, address
		ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), binary.BigEndian.Uint16(sa[2:4]))
	case family == 10 && len(sa) >= 24: // AF_INET6: port, flowinfo, address
		ap = netip.AddrPortFrom(netip.AddrFrom16([16]byte(sa[8:24])), binary.BigEndian.Uint16(sa[2:4]))
	default:
		d.fail("address family %d (%d bytes)", family, len(sa))
		return ""
	}
	return ap.String() + "/" + strconv.FormatUint(uint64(nonce), 10)
}
