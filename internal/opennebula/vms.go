package opennebula

import (
	"context"
	"sort"
)

// VMs returns every VM that is not DONE, with its RBD disks, through
// one.vmpool.infoextended (one.vmpool.info omits SOURCE and CEPH_*).
//
// Similar To: onevm list --extended
func (c *Client) VMs(ctx context.Context) ([]*VMInfo, error) {
	body, err := c.callString(ctx, "one.vmpool.infoextended", -2, -1, -1, -1)
	if err != nil {
		return nil, err
	}
	pool, err := parseXMLTree([]byte(body), "VM_POOL")
	if err != nil {
		return nil, &Error{Method: "one.vmpool.infoextended", Err: err, kind: ErrProtocol}
	}
	var out []*VMInfo
	for _, n := range pool.children("VM") {
		vm, err := vmFromNode(n)
		if err != nil {
			return nil, &Error{Method: "one.vmpool.infoextended", Err: err, kind: ErrProtocol}
		}
		out = append(out, vm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
