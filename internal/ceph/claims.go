package ceph

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// ClaimVMs returns the ids of the VMs that have a claim object
// (engine.ClaimObject) in pool, sorted.
// Similar To: rados -p POOL ls | grep '^rbdfence.vm.'
func (c *Cluster) ClaimVMs(ctx context.Context, pool string) ([]int, error) {
	prefix := strings.TrimSuffix(engine.ClaimObject(0), "0")
	return call(ctx, func() ([]int, error) {
		io, err := c.conn.OpenIOContext(pool)
		if err != nil {
			return nil, err
		}
		defer io.Destroy()
		var out []int
		err = io.ListObjects(func(oid string) {
			if rest, ok := strings.CutPrefix(oid, prefix); ok {
				if id, err := strconv.Atoi(rest); err == nil && id >= 0 && engine.ClaimObject(id) == oid {
					out = append(out, id)
				}
			}
		})
		sort.Ints(out)
		return out, err
	})
}
