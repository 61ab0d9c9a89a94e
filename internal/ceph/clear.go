//go:build cgo

package ceph

import (
	"context"
	"errors"

	"github.com/ceph/go-ceph/rados"
)

// ClearObject empties the object (it then reads as no data); a missing object
// is not an error. Callers hold the object's lease.
func (c *Cluster) ClearObject(ctx context.Context, pool, oid string) error {
	_, err := call(ctx, func() (struct{}, error) {
		io, err := c.conn.OpenIOContext(pool)
		if err != nil {
			return struct{}{}, err
		}
		defer io.Destroy()
		if err := io.Truncate(oid, 0); err != nil && !errors.Is(err, rados.ErrNotFound) {
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
	return err
}
