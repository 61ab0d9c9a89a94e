package frontend

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"

	"github.com/rbdfence/rbdfence/internal/outcome"
)

// MaxStdin bounds what a driver reads from oned on stdin.
const MaxStdin = 64 << 20

// ReadStdin reads a driver's stdin, at most MaxStdin bytes.
func ReadStdin(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxStdin+1))
	if err != nil {
		return nil, errorf(outcome.Usage, -1, "reading stdin: %v", err)
	}
	if len(b) > MaxStdin {
		return nil, errorf(outcome.Usage, -1, "stdin is larger than %d bytes", MaxStdin)
	}
	return b, nil
}

// DecodeBase64 decodes what oned sends local actions and TM scripts on
// stdin (Base64.strict_encode64, possibly wrapped): blanks and newlines are
// ignored, anything else must be standard base64 with padding.
func DecodeBase64(what string, b []byte) ([]byte, error) {
	clean := bytes.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n':
			return -1
		}
		return r
	}, b)
	if len(clean) == 0 {
		return nil, fmt.Errorf("%s: stdin is empty, want base64", what)
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
	n, err := base64.StdEncoding.Decode(out, clean)
	if err != nil {
		return nil, fmt.Errorf("%s: stdin is not base64 (%v)", what, err)
	}
	return out[:n], nil
}

// readActionStdin reads a VMM action's base64 stdin for VM vm (and names the VM
// in the log from here on): what names the document in an error, undone
// says what did not happen because of it ("nothing was started").
func readActionStdin(e *Env, vm int, stdin io.Reader, what, undone string) ([]byte, error) {
	e.Log.SetVM(vm)
	raw, err := ReadStdin(stdin)
	if err != nil {
		return nil, err
	}
	doc, err := DecodeBase64(what, raw)
	if err != nil {
		return nil, errorf(outcome.Usage, vm, "%v; %s", err, undone)
	}
	return doc, nil
}

// xmlRoot returns the name of the root element of a well-formed XML
// document, or an error naming what is wrong.
func xmlRoot(doc []byte) (string, error) {
	dec := xml.NewDecoder(bytes.NewReader(doc))
	root := ""
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("not well-formed XML: %s", clip(err.Error()))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				if root != "" {
					return "", errors.New("not well-formed XML: more than one root element")
				}
				root = t.Name.Local
			}
			depth++
		case xml.EndElement:
			depth--
		case xml.CharData:
			if depth == 0 && len(bytes.TrimSpace(t)) > 0 {
				return "", errors.New("not well-formed XML: text outside the root element")
			}
		}
	}
	if root == "" {
		return "", errors.New("not XML: no root element")
	}
	return root, nil
}

// actionVM returns the <VM> element of a VMM driver action document.
func actionVM(doc []byte) ([]byte, error) {
	dec := xml.NewDecoder(bytes.NewReader(doc))
	depth := 0
	var start int64 = -1
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not well-formed XML: %s", clip(err.Error()))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 && t.Name.Local != "VMM_DRIVER_ACTION_DATA" {
				return nil, fmt.Errorf("stdin is a <%s> document, want <VMM_DRIVER_ACTION_DATA>", clip(t.Name.Local))
			}
			if depth == 1 && t.Name.Local == "VM" && start < 0 {
				start = off
			}
			depth++
		case xml.EndElement:
			depth--
			if depth == 1 && t.Name.Local == "VM" && start >= 0 {
				return doc[start:dec.InputOffset()], nil
			}
		}
	}
	return nil, errors.New("the driver action has no <VM>")
}

// parseVMID parses a VM id argument.
func parseVMID(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return -1, fmt.Errorf("VM id %q is not a non-negative integer", clip(s))
	}
	return n, nil
}

// hostRE is what a host name from oned may look like before it goes to ssh:
// a DNS name or an IP address. A leading '-' would be taken as an option.
// hostRE is compiled on first use: its counted repetition costs thousands
// of allocations, which every run of the CLI would pay at start-up.
var hostRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}$`) })

// checkHost validates a host name from outside input.
func checkHost(what, h string) error {
	if !hostRE().MatchString(h) {
		return fmt.Errorf("%s %q is not a host name", what, clip(h))
	}
	return nil
}
