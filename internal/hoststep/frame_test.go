package hoststep

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
)

// TestReadRequestFrame: the request is read exactly, whatever follows it
// stays for the next reader; a bad or short frame is an error.
func TestReadRequestFrame(t *testing.T) {
	body := `{"op":"start","vm":7,"seq":1,"host":"h","run":"r","source":"frontend","disks":[{"pool":"one","name":"one-1"}],"version":3}`
	for _, tc := range []struct {
		name, in, rest, err string
	}{
		{name: "request then domain", in: RequestTag + " " + itoa(len(body)) + "\n" + body + "<domain/>\n", rest: "<domain/>\n"},
		{name: "no header", in: body, err: "no rbdfence-step-request header"},
		{name: "empty", in: "", err: "stdin ended before"},
		{name: "other tag", in: "rbdfence-step-response 3\n{}\n", err: "not a rbdfence-step-request frame"},
		{name: "bad length", in: RequestTag + " 1x\n{}", err: "bad length"},
		{name: "huge length", in: RequestTag + " 99999999\n{}", err: "larger than"},
		{name: "short body", in: RequestTag + " 500\n" + body, err: "of 500 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := strings.NewReader(tc.in)
			req, err := ReadRequestFrame(r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || req.Op != OpStart || req.VM != 7 {
				t.Fatalf("%+v %v", req, err)
			}
			rest, _ := io.ReadAll(r)
			if string(rest) != tc.rest {
				t.Fatalf("left %q, want %q", rest, tc.rest)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestFrameSplitter: written in chunks of every size, the stream splits
// into what came before the frame, the frame's body and the rest, which
// alone reaches Rest; output that looks like a frame after the frame is
// the rest's, and no frame leaves everything in Unframed.
func TestFrameSplitter(t *testing.T) {
	body := `{"op":"start","ok":true}`
	frame := string(FrameHeader(ResponseTag, len(body))) + body
	for _, tc := range []struct {
		name, in, before, body, rest string
		framed                       bool
	}{
		{name: "frame and deploy output", in: frame + "one-42\n", body: body, rest: "one-42\n", framed: true},
		{name: "diagnostics first", in: "sh: warning\n" + frame + "one-42\n", before: "sh: warning\n", body: body, rest: "one-42\n", framed: true},
		{name: "a frame in the rest is the rest's", in: frame + frame, body: body, rest: frame, framed: true},
		{name: "no frame", in: "sh: 1: /x/rbdfence-host: not found\n", before: "sh: 1: /x/rbdfence-host: not found\n"},
		{name: "old host's plain answer", in: `{"ok":false,"kind":"usage","error":"flag provided but not defined: -framed"}` + "\n", before: `{"ok":false,"kind":"usage","error":"flag provided but not defined: -framed"}` + "\n"},
		{name: "cut short", in: frame[:len(frame)-3], body: body[:len(body)-3]},
		{name: "empty frame", in: ResponseTag + " 0\nrest", rest: "rest", framed: true},
		{name: "long line then frame", in: strings.Repeat("x", 200) + "\n" + frame, before: strings.Repeat("x", 200) + "\n", body: body, framed: true},
	} {
		for _, chunk := range []int{1, 2, 7, 1 << 20} {
			var rest bytes.Buffer
			calls := 0
			s := &FrameSplitter{Rest: &rest, OnFrame: func() { calls++ }}
			for in := tc.in; len(in) > 0; {
				n := min(chunk, len(in))
				if k, err := s.Write([]byte(in[:n])); k != n || err != nil {
					t.Fatalf("%s/%d: Write = %d, %v", tc.name, chunk, k, err)
				}
				in = in[n:]
			}
			if s.Framed() != tc.framed || string(s.Body) != tc.body || rest.String() != tc.rest {
				t.Errorf("%s/%d: framed %v body %q rest %q; want %v %q %q", tc.name, chunk, s.Framed(), s.Body, rest.String(), tc.framed, tc.body, tc.rest)
			}
			if tc.framed && calls != 1 || !tc.framed && calls != 0 {
				t.Errorf("%s/%d: OnFrame called %d times", tc.name, chunk, calls)
			}
			if tc.framed && string(s.Unframed()) != tc.before {
				t.Errorf("%s/%d: before %q, want %q", tc.name, chunk, s.Unframed(), tc.before)
			}
			if !tc.framed && tc.name != "cut short" && string(s.Unframed()) != tc.before {
				t.Errorf("%s/%d: unframed %q, want %q", tc.name, chunk, s.Unframed(), tc.before)
			}
		}
	}
}
