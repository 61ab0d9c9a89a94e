package hook

import (
	"fmt"
	"io"
	"time"
)

// Bounds on reading the domain XML from libvirtd.
const (
	// MaxXML is the largest domain XML the hook accepts.
	MaxXML = 16 << 20
	// ReadTimeout bounds reading (or draining) stdin. libvirtd writes the
	// whole document at once and closes the pipe, so this only matters when
	// the hook is run by hand with a terminal on stdin.
	ReadTimeout = 10 * time.Second
	// maxDrain bounds what Drain reads and discards.
	maxDrain = 64 << 20
)

// ReadInput reads the domain XML from r: at most max bytes, within timeout.
// A larger document is an error (and is drained up to maxDrain, so that the
// writer never sees a broken pipe).
func ReadInput(r io.Reader, max int64, timeout time.Duration) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, max+1))
		if err == nil && int64(len(b)) > max {
			_, _ = io.Copy(io.Discard, io.LimitReader(r, maxDrain))
			err = fmt.Errorf("domain XML on stdin is larger than %d bytes", max)
		}
		done <- result{b, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("reading the domain XML on stdin: %w", res.err)
		}
		return res.b, nil
	case <-t.C:
		return nil, fmt.Errorf("reading the domain XML on stdin: no end of input after %s", timeout)
	}
}

// Drain reads and discards r (up to maxDrain bytes, within timeout). libvirt
// ignores a hook that closes stdin early (it drops EPIPE), but an older
// libvirt or a chaining shell script may not: reading everything is the
// polite way to say "not interested".
func Drain(r io.Reader, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(r, maxDrain))
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
