package hoststep

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// Framing lets a host step share one ssh session with the remote action it
// admits (the front-end's deploy and restore): the request comes first on
// the session's stdin, the remote action's input after it; the response
// comes first on the session's stdout, the remote action's output after it.
// A frame is a header line "<tag> <n>\n" followed by exactly n bytes of
// JSON. The host reads its request without reading ahead (ReadRequestFrame),
// so that what follows is left on stdin for the remote action.
const (
	// RequestTag starts a framed request.
	RequestTag = "rbdfence-step-request"
	// ResponseTag starts a framed response.
	ResponseTag = "rbdfence-step-response"
	// maxHeader bounds a header line: the longer tag, a space, up to 8 digits, "\n".
	maxHeader = len(ResponseTag) + 1 + 8 + 1
)

// FrameHeader returns the header of a frame of n bytes under tag.
func FrameHeader(tag string, n int) []byte {
	return []byte(tag + " " + strconv.Itoa(n) + "\n")
}

// frameLen parses a header line (without its "\n") for tag.
func frameLen(tag string, line []byte) (int, error) {
	num, ok := bytes.CutPrefix(line, []byte(tag+" "))
	if !ok {
		return 0, fmt.Errorf("not a %s frame", tag)
	}
	n, err := strconv.Atoi(string(num))
	if err != nil || n < 0 || strconv.Itoa(n) != string(num) {
		return 0, fmt.Errorf("%s frame: bad length %q", tag, clip(string(num)))
	}
	if n > MaxSize {
		return 0, fmt.Errorf("%s frame: %d bytes, larger than %d", tag, n, MaxSize)
	}
	return n, nil
}

// WriteRequestFrame writes req framed: the front-end's side.
func WriteRequestFrame(w io.Writer, body []byte) error {
	_, err := w.Write(append(FrameHeader(RequestTag, len(body)), body...))
	return err
}

// ReadRequestFrame reads one framed request from r (the host's stdin)
// without reading past it: the header byte by byte, then exactly the body.
// The error says what was wrong; the request is decoded as ReadRequest does.
func ReadRequestFrame(r io.Reader) (*Request, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := r.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			if len(line) >= maxHeader {
				return nil, fmt.Errorf("host step request: no %s header within %d bytes", RequestTag, maxHeader)
			}
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("host step request: stdin ended before the %s header", RequestTag)
		}
		if err != nil {
			return nil, fmt.Errorf("host step request: %w", err)
		}
	}
	n, err := frameLen(RequestTag, line)
	if err != nil {
		return nil, fmt.Errorf("host step request: %w", err)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("host step request: %d of %d bytes: %w", len(body), n, err)
	}
	return ReadRequest(bytes.NewReader(body))
}

// WriteResponseFrame writes the encoded response framed, in one write.
func WriteResponseFrame(w io.Writer, body []byte) error {
	_, err := w.Write(append(FrameHeader(ResponseTag, len(body)), body...))
	return err
}

// FrameSplitter is the front-end's side of a framed session's stdout: an
// io.Writer that keeps what comes before the response frame (the step's
// own diagnostics: a shell's "not found", an old host's unframed answer)
// in Before, the frame's body in Body, and passes everything after the
// frame to Rest. OnFrame, if set, is called once when the frame is
// complete. Output that follows the frame can never be taken for it.
type FrameSplitter struct {
	Rest    io.Writer
	OnFrame func()

	Before  bytes.Buffer // up to maxBefore bytes
	Body    []byte
	done    bool
	line    []byte // the current line before the frame
	want    int    // body bytes still to come; -1 before the header
	started bool
}

// maxBefore bounds what FrameSplitter keeps before the frame.
const maxBefore = 64 << 10

// Framed reports whether the whole frame arrived.
func (s *FrameSplitter) Framed() bool { return s.done }

func (s *FrameSplitter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		switch {
		case s.done:
			if s.Rest != nil {
				if _, err := s.Rest.Write(p); err != nil {
					return total - len(p), err
				}
			}
			return total, nil
		case s.started:
			k := min(s.want, len(p))
			s.Body = append(s.Body, p[:k]...)
			s.want -= k
			p = p[k:]
			if s.want == 0 {
				s.done = true
				if s.OnFrame != nil {
					s.OnFrame()
				}
			}
		default:
			i := bytes.IndexByte(p, '\n')
			chunk := p
			if i >= 0 {
				chunk = p[:i]
			}
			s.line = append(s.line, chunk...)
			if i < 0 {
				if len(s.line) > maxHeader {
					s.keep(s.line)
					s.line = s.line[:0]
				}
				return total, nil
			}
			p = p[i+1:]
			if n, err := frameLen(ResponseTag, s.line); err == nil {
				s.started, s.want = true, n
				s.Body = make([]byte, 0, n)
				if n == 0 {
					s.done = true
					if s.OnFrame != nil {
						s.OnFrame()
					}
				}
			} else {
				s.keep(append(s.line, '\n'))
			}
			s.line = s.line[:0]
		}
	}
	return total, nil
}

func (s *FrameSplitter) keep(b []byte) {
	if room := maxBefore - s.Before.Len(); room > 0 {
		s.Before.Write(b[:min(room, len(b))])
	}
}

// Unframed returns what came before the frame, with a partial last line.
func (s *FrameSplitter) Unframed() []byte {
	out := append([]byte(nil), s.Before.Bytes()...)
	if !s.started {
		out = append(out, s.line...)
	}
	return out
}

// FrameAdmits reports whether a response frame's body says the start step
// succeeded (the remote action runs after it). Only a well-formed answer
// admits, and only from a host whose versions read this build's claim
// format (CheckVersions).
func FrameAdmits(body []byte) bool {
	resp, err := ReadResponse(bytes.NewReader(body))
	return err == nil && resp.OK && CheckVersions("", resp.Versions, engine.ClaimFormat, true) == nil
}
