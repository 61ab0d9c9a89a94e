package opennebula

import (
	"context"
	"strings"
)

// PoolHost is one host of oned's host pool as the front-end's event
// collection needs it.
type PoolHost struct {
	HostInfo
	// VMMad is the host's VM_MAD: the NAME of the oned.conf VM_MAD that
	// drives it (Host::to_xml, src/host/Host.cc:401-429 of release-7.4.0).
	VMMad string
}

// Hosts returns every host of the pool, read with one.hostpool.info.
//
// Similar To: onehost list -x
func (c *Client) Hosts(ctx context.Context) ([]PoolHost, error) {
	body, err := c.callString(ctx, "one.hostpool.info")
	if err != nil {
		return nil, err
	}
	return parseHostPool([]byte(body))
}

func parseHostPool(doc []byte) ([]PoolHost, error) {
	pool, err := parseXMLTree(doc, "HOST_POOL")
	if err != nil {
		return nil, &Error{Method: "one.hostpool.info", Err: err, kind: ErrProtocol}
	}
	var out []PoolHost
	for _, n := range pool.children("HOST") {
		h, err := hostFromNode(n)
		if err != nil {
			return nil, &Error{Method: "one.hostpool.info", Err: err, kind: ErrProtocol}
		}
		p := PoolHost{HostInfo: *h}
		if m := n.child("VM_MAD"); m != nil {
			p.VMMad = strings.TrimSpace(m.text)
		}
		out = append(out, p)
	}
	return out, nil
}
