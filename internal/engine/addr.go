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

// ParseAddr parses "ip:port/nonce" as Ceph prints entity addresses, with an
// optional messenger prefix ("v1:", "v2:", "any:") and IPv6 in brackets.
func ParseAddr(s string) (Addr, error) {
	raw := s
	for _, p := range []string{"v1:", "v2:", "any:"} {
		s = strings.TrimPrefix(s, p)
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
	if err != nil {
		return Addr{}, fmt.Errorf("client address %q: want IP:PORT/NONCE", raw)
	}
	return Addr{IP: ap.Addr().Unmap(), Port: ap.Port(), Nonce: uint32(nonce)}, nil
}

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
