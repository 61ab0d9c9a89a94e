package opennebula

import "context"

// Version returns oned's version (one.system.version): a cheap call that
// proves the endpoint answers and accepts the credentials.
func (c *Client) Version(ctx context.Context) (string, error) {
	return c.callString(ctx, "one.system.version")
}
