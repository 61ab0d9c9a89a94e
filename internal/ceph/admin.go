//go:build cgo

package ceph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// BlocklistEntry is one entry of the OSD blocklist.
type BlocklistEntry struct {
	Addr  string    `json:"addr"`
	Until time.Time `json:"until"`
}

// CapError says our cephx user lacks a capability, and which one to grant.
type CapError struct {
	User string
	What string
	Need string
}

func (e *CapError) Error() string {
	return fmt.Sprintf("client.%s may not %s: grant it %s (or use a user that has it, e.g. --id rbdfence-admin)", e.User, e.What, e.Need)
}

// Brief: engine.Briefer.
func (e *CapError) Brief() string { return "client." + e.User + " lacks a Ceph cap; grant it (VM log)" }

// Outcome: our credentials are refused for this.
func (e *CapError) Outcome() outcome.Kind { return outcome.Unavailable }

// RMCap is the monitor capability that allows removing blocklist entries.
const RMCap = `mon 'profile rbd, allow command "osd blocklist" with blocklistop=rm'`

func (c *Cluster) mon(ctx context.Context, cmd any) ([]byte, string, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, "", err
	}
	type res struct {
		out  []byte
		info string
	}
	r, err := call(ctx, func() (res, error) {
		out, info, err := c.conn.MonCommand(b)
		return res{out, info}, err
	})
	return r.out, r.info, err
}

// BlocklistList returns the blocklist's exact-address entries.
// Similar To: ceph osd blocklist ls
func (c *Cluster) BlocklistList(ctx context.Context) ([]BlocklistEntry, error) {
	out, info, err := c.mon(ctx, map[string]string{"prefix": "osd blocklist ls", "format": "json"})
	if err != nil {
		return nil, fmt.Errorf("osd blocklist ls: %v %s", err, strings.TrimSpace(info))
	}
	return parseBlocklist(out)
}

// parseBlocklist reads the reply: entries and ranges, two JSON arrays back
// to back (the second is absent on older releases).
func parseBlocklist(out []byte) ([]BlocklistEntry, error) {
	type raw struct {
		Addr  string `json:"addr"`
		Until string `json:"until"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var entries []raw
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("osd blocklist ls: unexpected reply: %v", err)
	}
	var list []BlocklistEntry
	for _, e := range entries {
		t, err := time.Parse("2006-01-02T15:04:05.999999-0700", e.Until)
		if err != nil {
			return nil, fmt.Errorf("osd blocklist ls: entry %s: bad time %q", e.Addr, e.Until)
		}
		a := e.Addr
		if p, err := engine.ParseAddr(a); err == nil {
			a = p.String()
		}
		list = append(list, BlocklistEntry{Addr: a, Until: t.UTC()})
	}
	return list, nil
}

// Unblocklist removes an exact address from the blocklist. Needs RMCap.
// Similar To: ceph osd blocklist rm ADDR
func (c *Cluster) Unblocklist(ctx context.Context, a engine.Addr) error {
	_, info, err := c.mon(ctx, map[string]string{"prefix": "osd blocklist", "blocklistop": "rm", "addr": a.String()})
	if Errno(err) == int(syscall.EACCES) || Errno(err) == int(syscall.EPERM) {
		return &CapError{User: c.cfg.User, What: "remove blocklist entries", Need: RMCap}
	}
	if err != nil {
		return fmt.Errorf("osd blocklist rm %s: %v %s", a, err, strings.TrimSpace(info))
	}
	return nil
}

// CanBlocklist verifies that our user may add blocklist entries without
// adding one: it sends an add with an address that passes "profile rbd"'s
// address pattern but that the monitor cannot parse as an address. A
// permission error means the cap is missing; a parse error means the cap is
// there and the command was refused only for its argument.
func (c *Cluster) CanBlocklist(ctx context.Context) error {
	_, _, err := c.mon(ctx, map[string]any{"prefix": "osd blocklist", "blocklistop": "add", "addr": "rbdfence-doctor-probe/1", "expire": json.Number("1.0")})
	switch Errno(err) {
	case int(syscall.EACCES), int(syscall.EPERM):
		return &CapError{User: c.cfg.User, What: "add blocklist entries", Need: "mon 'profile rbd'"}
	case int(syscall.EINVAL), 0:
		if err == nil {
			return errors.New("the monitor accepted a blocklist probe it should have rejected")
		}
		return nil
	}
	return err
}
