package hostfence

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"

	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// MaxInput bounds the hook's stdin (a host document is a few KB).
const MaxInput = 4 << 20

// ReadHookInput reads what OpenNebula's HA hook gives its fence: the host's
// XML, base64 (Base64.strict_encode64 of host.to_xml,
// share/hooks/ft/host_error.rb:207-212 in release-7.4.0), blanks and
// newlines ignored. Only the host's ID is used from it: the state is read
// from oned again.
func ReadHookInput(r io.Reader) (*opennebula.HostInfo, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil {
		return nil, fmt.Errorf("fence-host: reading stdin: %v", err)
	}
	if len(b) > MaxInput {
		return nil, fmt.Errorf("fence-host: stdin is larger than %d bytes", MaxInput)
	}
	clean := bytes.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n':
			return -1
		}
		return r
	}, b)
	if len(clean) == 0 {
		return nil, fmt.Errorf("fence-host: stdin is empty, want the host's XML, base64")
	}
	doc := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
	n, err := base64.StdEncoding.Decode(doc, clean)
	if err != nil {
		return nil, fmt.Errorf("fence-host: stdin is not base64 (%v)", err)
	}
	h, err := opennebula.ParseHost(doc[:n])
	if err != nil {
		return nil, fmt.Errorf("fence-host: stdin is not a host document: %v", err)
	}
	return h, nil
}
