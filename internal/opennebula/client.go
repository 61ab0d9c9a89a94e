// Package opennebula is rbdfence's OpenNebula front-end client: it reads a
// VM from oned (which RBD images its QEMU opens, where it is placed) and
// writes collision events into the VM's user template, where admins see
// them in `onevm show` and `rbdfence events` lists them cluster-wide.
//
// It talks XML-RPC through goca's client, one bounded call at a time: every
// call has the client's timeout and honours the caller's context. The VM
// documents are parsed here (ParseVM), not by goca's schemas, so that the
// online path and the fuzzed parser are the same code. The package is pure
// Go (no cgo): front-ends may have no Ceph libraries.
package opennebula

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/OpenNebula/one/src/oca/go/src/goca"
	goerrs "github.com/OpenNebula/one/src/oca/go/src/goca/errors"

	"github.com/rbdfence/rbdfence/internal/events"
)

// DefaultEndpoint is oned's XML-RPC endpoint when ONE_XMLRPC is not set.
const DefaultEndpoint = "http://localhost:2633/RPC2"

// oned error codes (RequestManager ErrorCode).
const (
	CodeAuthentication = 0x0100
	CodeAuthorization  = 0x0200
	CodeNoExists       = 0x0400
	CodeAction         = 0x0800
	CodeXMLRPCAPI      = 0x1000
	CodeInternal       = 0x2000
	CodeAllocate       = 0x4000
	CodeLocked         = 0x8000
)

// Error kinds; test with errors.Is.
var (
	// ErrUnreachable: oned did not answer (refused, timeout, HTTP error).
	// It also matches events.ErrUnavailable.
	ErrUnreachable = fmt.Errorf("oned unreachable (%w)", events.ErrUnavailable)
	// ErrAuthentication: oned rejected the credentials.
	ErrAuthentication = errors.New("oned rejected the credentials")
	// ErrAuthorization: the user may not do this.
	ErrAuthorization = errors.New("not authorized by oned")
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("not found in oned")
	// ErrProtocol: the answer was not what oned sends.
	ErrProtocol = errors.New("unexpected answer from oned")
)

// Error is a failed oned call. It never contains the credentials.
type Error struct {
	Method string // XML-RPC method, e.g. "one.vm.info"
	Code   int    // oned error code (CodeNoExists...), 0 if oned did not answer
	Err    error  // what went wrong
	kind   error  // one of the Err* kinds, or nil
}

func (e *Error) Error() string {
	msg := clipLine(e.Err.Error())
	if errors.Is(e.kind, ErrUnreachable) {
		return fmt.Sprintf("%s: oned unreachable: %s", e.Method, msg)
	}
	return fmt.Sprintf("%s: %s", e.Method, msg)
}

// Unwrap returns the error kind and the cause.
func (e *Error) Unwrap() []error {
	if e.kind == nil {
		return []error{e.Err}
	}
	return []error{e.kind, e.Err}
}

// Client calls oned. It is safe for concurrent use.
type Client struct {
	endpoint  string
	token     string // "user:password"; never printed
	timeout   time.Duration
	transport http.RoundTripper
}

// New returns a client for endpoint (e.g. "http://127.0.0.1:2633/RPC2")
// that authenticates with the "user:password" line of authFile (the format
// of ~/.one/one_auth) and gives every call at most timeout.
func New(endpoint, authFile string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("oned endpoint %q: want http(s)://host:port/RPC2", redactURL(endpoint))
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("oned timeout %v: must be positive", timeout)
	}
	token, err := readAuthFile(authFile)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = timeout
	return &Client{endpoint: endpoint, token: token, timeout: timeout, transport: tr}, nil
}

// FromEnv returns a client configured like goca's NewConfig("", "", ""):
// credentials from $ONE_AUTH (default $HOME/.one/one_auth), endpoint from
// $ONE_XMLRPC (default http://localhost:2633/RPC2). Unlike goca, a missing
// or malformed credentials file is an error.
func FromEnv(timeout time.Duration) (*Client, error) {
	authFile := os.Getenv("ONE_AUTH")
	if authFile == "" {
		home := os.Getenv("HOME")
		if home == "" {
			return nil, errors.New("OpenNebula credentials: neither ONE_AUTH nor HOME is set")
		}
		authFile = filepath.Join(home, ".one", "one_auth")
	}
	endpoint := os.Getenv("ONE_XMLRPC")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	return New(endpoint, authFile, timeout)
}

// Endpoint returns the XML-RPC endpoint.
func (c *Client) Endpoint() string { return c.endpoint }

// String describes the client without its credentials.
func (c *Client) String() string {
	return "opennebula.Client(" + redactURL(c.endpoint) + ")"
}

// GoString is String: %#v must not print the credentials either.
func (c *Client) GoString() string { return c.String() }

// readAuthFile reads "user:password" from the first line of path. Errors
// name the file, never its content.
func readAuthFile(path string) (string, error) {
	if path == "" {
		return "", errors.New("OpenNebula credentials file not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("OpenNebula credentials: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return "", fmt.Errorf("OpenNebula credentials %s: file is empty, want one line user:password", path)
	}
	user, pass, ok := strings.Cut(line, ":")
	if !ok || strings.TrimSpace(user) == "" || pass == "" {
		return "", fmt.Errorf("OpenNebula credentials %s: want one line user:password", path)
	}
	return line, nil
}

// ctxTransport attaches the call's context to goca's requests (goca builds
// them without one), so cancelling the context aborts the call.
type ctxTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(r.WithContext(t.ctx))
}

// call performs one XML-RPC call through goca, bounded by the client's
// timeout and ctx.
func (c *Client) call(ctx context.Context, method string, args ...any) (*goca.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Method: method, Err: err, kind: ErrUnreachable}
	}
	hc := &http.Client{Timeout: c.timeout, Transport: ctxTransport{ctx: ctx, base: c.transport}}
	gc := goca.NewClient(goca.OneConfig{Token: c.token, Endpoint: c.endpoint}, hc)
	resp, err := gc.Call(method, args...)
	if err != nil {
		return nil, c.classify(ctx, method, err)
	}
	return resp, nil
}

// callString is call for methods whose answer is a string (XML documents).
func (c *Client) callString(ctx context.Context, method string, args ...any) (string, error) {
	resp, err := c.call(ctx, method, args...)
	if err != nil {
		return "", err
	}
	return resp.Body(), nil
}

// classify turns a goca error into an *Error of the right kind.
func (c *Client) classify(ctx context.Context, method string, err error) error {
	var (
		re *goerrs.ResponseError
		ce *goerrs.ClientError
	)
	switch {
	case errors.As(err, &re):
		e := &Error{Method: method, Code: int(re.Code), Err: err}
		switch int(re.Code) {
		case CodeAuthentication:
			e.kind = ErrAuthentication
		case CodeAuthorization:
			e.kind = ErrAuthorization
		case CodeNoExists:
			e.kind = ErrNotFound
		}
		return e
	case ctx.Err() != nil:
		return &Error{Method: method, Err: fmt.Errorf("%w (%s)", ctx.Err(), clipLine(err.Error())), kind: ErrUnreachable}
	case errors.As(err, &ce):
		switch ce.Code {
		case goerrs.ClientReqHTTP, goerrs.ClientRespHTTP:
			return &Error{Method: method, Err: err, kind: ErrUnreachable}
		}
		return &Error{Method: method, Err: err, kind: ErrProtocol}
	}
	return &Error{Method: method, Err: err}
}

// redactURL drops any user info from an endpoint URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	return u.String()
}

// clipLine keeps an error message on one line.
func clipLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
