package engine

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Addr is the address of one Ceph client instance: ip:port/nonce. The nonce
// makes it exact to one process, so blocklisting an Addr never touches any
// other client on the same host.
type Addr struct {
	IP    netip.Addr
	Port  uint16
	Nonce uint32
}

// ParseAddr parses one client address as Ceph prints it: "ip:port/nonce"
// with an optional messenger prefix ("v1:", "v2:", "any:"), IPv6 in
// brackets ("[::1]:0/7", "v2:[::1]:0/7"), or an address vector in brackets
// ("[v2:10.0.0.1:0/7,v1:10.0.0.1:0/7]": its first address; the entries of
// one vector name the same client instance). The IP is kept exactly as
// printed: an IPv4-mapped IPv6 address stays one, because the OSD blocklist
// matches the address family too (compare IPs with Unmap, see Scope).
func ParseAddr(s string) (Addr, error) {
	raw := s
	if strings.HasSuffix(s, "]") && (strings.HasPrefix(s, "[v1:") || strings.HasPrefix(s, "[v2:") || strings.HasPrefix(s, "[any:")) {
		// an address vector (a bracketed IPv6 address never starts so)
		s, _, _ = strings.Cut(s[1:len(s)-1], ",")
	}
	for _, p := range []string{"v1:", "v2:", "any:"} {
		if strings.HasPrefix(s, p) {
			s = s[len(p):]
			break
		}
	}
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 {
		return Addr{}, fmt.Errorf("client address %q: want IP:PORT/NONCE", raw)
	}
	nonce, err := strconv.ParseUint(s[slash+1:], 10, 32)
	if err != nil {
		return Addr{}, fmt.Errorf("client address %q: bad nonce: want IP:PORT/NONCE", raw)
	}
	ap, err := netip.ParseAddrPort(s[:slash])
	if err != nil || ap.Addr().Zone() != "" {
		return Addr{}, fmt.Errorf("client address %q: want IP:PORT/NONCE", raw)
	}
	return Addr{IP: ap.Addr(), Port: ap.Port(), Nonce: uint32(nonce)}, nil
}

// SameIP reports whether ip is the address of a's client, an IPv4 address
// and its IPv4-mapped IPv6 form being the same.
func (a Addr) SameIP(ip netip.Addr) bool { return a.IP.Unmap() == ip.Unmap() }

// String formats the address the way "ceph osd blocklist add" takes it.
func (a Addr) String() string {
	return netip.AddrPortFrom(a.IP, a.Port).String() + "/" + strconv.FormatUint(uint64(a.Nonce), 10)
}

// Exact reports whether the address names one client instance. An address
// with nonce 0 would blocklist every client on that IP and port.
func (a Addr) Exact() bool { return a.IP.IsValid() && a.Nonce != 0 }

// MarshalText implements encoding.TextMarshaler.
func (a Addr) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Addr) UnmarshalText(b []byte) error {
	p, err := ParseAddr(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

func appendUnique(as []Addr, a Addr) []Addr {
	for _, x := range as {
		if x == a {
			return as
		}
	}
	return append(as, a)
}
