package ceph

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// UnresolvedError is a monitor host name that does not resolve. librados
// would fail with EINVAL ("rados: ret=-22") and print its own "server name
// not found" line on stdout, the host step's protocol channel: Connect
// says it first, by name.
type UnresolvedError struct {
	Name string
	Err  error
}

func (e *UnresolvedError) Error() string {
	return fmt.Sprintf("cannot resolve monitor host %s (%v)", e.Name, e.Err)
}

func (e *UnresolvedError) Unwrap() error { return e.Err }

// monNames returns the host names (not IP addresses) in a mon_host value:
// "a.example:6789,10.0.0.2", "v1:mon1:16789", "[v2:mon1:3300/0,v1:mon1:6789/0]
// [v2:...]"; IPv6 addresses ("[::1]:6789", "v2:[fd00::1]:3300") have more
// than one colon and are never names.
func monNames(monHost string) []string {
	var out []string
	for _, tok := range strings.FieldsFunc(monHost, func(r rune) bool { return strings.ContainsRune(", ;\t\n", r) }) {
		t := strings.Trim(tok, "[]")
		for _, p := range []string{"v1:", "v2:", "any:"} {
			t = strings.TrimPrefix(t, p)
		}
		t, _, _ = strings.Cut(t, "/")
		if strings.Count(t, ":") > 1 || strings.ContainsAny(t, "[]") {
			continue
		}
		host, _, _ := strings.Cut(t, ":")
		if _, err := netip.ParseAddr(host); err == nil || host == "" {
			continue
		}
		out = append(out, host)
	}
	return out
}

// resolveMons resolves every monitor host name of monHost within d; the
// first that does not resolve is an *UnresolvedError.
func resolveMons(ctx context.Context, monHost string, d time.Duration) error {
	for _, name := range monNames(monHost) {
		lctx, cancel := context.WithTimeout(ctx, d)
		_, err := net.DefaultResolver.LookupHost(lctx, name)
		cancel()
		if err != nil {
			if de, ok := err.(*net.DNSError); ok {
				err = fmt.Errorf("%s", de.Err)
			}
			return &UnresolvedError{Name: name, Err: err}
		}
	}
	return nil
}
