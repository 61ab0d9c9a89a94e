package oned

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Call sends one XML-RPC call to url, exactly the bytes a client sends
// (every parameter a string, an int or a bool), and returns the decoded
// answer: oned answers an array ([ok, body or message, code, ...]); a
// fault of xmlrpc-c comes back as map{"faultCode","faultString"}.
func Call(url, method string, params ...any) (any, error) {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0"?><methodCall><methodName>`)
	xml.EscapeText(&b, []byte(method))
	b.WriteString(`</methodName><params>`)
	for _, p := range params {
		b.WriteString("<param><value>")
		switch v := p.(type) {
		case string:
			b.WriteString("<string>")
			xml.EscapeText(&b, []byte(v))
			b.WriteString("</string>")
		case int:
			fmt.Fprintf(&b, "<int>%d</int>", v)
		case bool:
			if v {
				b.WriteString("<boolean>1</boolean>")
			} else {
				b.WriteString("<boolean>0</boolean>")
			}
		default:
			return nil, fmt.Errorf("xmlrpc: parameter %T", p)
		}
		b.WriteString("</value></param>")
	}
	b.WriteString(`</params></methodCall>`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, &b)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "text/xml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return decodeResponse(body)
}

// decodeResponse reads a <methodResponse>.
func decodeResponse(body []byte) (any, error) {
	d := xml.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("xmlrpc: no value in answer %q: %v", trunc(body), err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "value" {
			return decodeValue(d)
		}
	}
}

func trunc(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// decodeValue reads what follows a <value> start up to its end.
func decodeValue(d *xml.Decoder) (any, error) {
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.CharData:
			text.Write(t)
		case xml.EndElement: // </value>: an untyped string
			return text.String(), nil
		case xml.StartElement:
			v, err := decodeTyped(d, t.Name.Local)
			if err != nil {
				return nil, err
			}
			// up to </value>
			if err := skipTo(d, "value"); err != nil {
				return nil, err
			}
			return v, nil
		}
	}
}

func skipTo(d *xml.Decoder, end string) error {
	for {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		if e, ok := tok.(xml.EndElement); ok && e.Name.Local == end {
			return nil
		}
	}
}

func decodeTyped(d *xml.Decoder, typ string) (any, error) {
	switch typ {
	case "array":
		var out []any
		for {
			tok, err := d.Token()
			if err != nil {
				return nil, err
			}
			switch t := tok.(type) {
			case xml.StartElement:
				if t.Name.Local == "value" {
					v, err := decodeValue(d)
					if err != nil {
						return nil, err
					}
					out = append(out, v)
				}
			case xml.EndElement:
				if t.Name.Local == "array" {
					return out, nil
				}
			}
		}
	case "struct":
		out := map[string]any{}
		name := ""
		for {
			tok, err := d.Token()
			if err != nil {
				return nil, err
			}
			switch t := tok.(type) {
			case xml.StartElement:
				switch t.Name.Local {
				case "name":
					var s string
					if err := d.DecodeElement(&s, &t); err != nil {
						return nil, err
					}
					name = s
				case "value":
					v, err := decodeValue(d)
					if err != nil {
						return nil, err
					}
					out[name] = v
				}
			case xml.EndElement:
				if t.Name.Local == "struct" {
					return out, nil
				}
			}
		}
	default:
		var s string
		se := xml.StartElement{Name: xml.Name{Local: typ}}
		if err := d.DecodeElement(&s, &se); err != nil {
			return nil, err
		}
		switch typ {
		case "int", "i4", "i8":
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			return n, err
		case "boolean":
			return strings.TrimSpace(s) == "1", nil
		}
		return s, nil
	}
}

// RPC calls oned's XML-RPC API as oneadmin (the session is prepended) and
// returns the body of a successful answer ([true, body, ...]); a failure
// answer is an error carrying oned's message. The tests poll oned with it
// (one.vm.info is what `onevm show -x` prints) rather than with the Ruby
// CLI, which costs a second of CPU per call on a loaded machine; actions
// go through the CLI, as an operator runs them.
func (s *Stack) RPC(method string, params ...any) (string, error) {
	v, err := Call(s.RPCURL(), method, append([]any{s.session}, params...)...)
	if err != nil {
		return "", fmt.Errorf("%s: %w", method, err)
	}
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return "", fmt.Errorf("%s: answer %#v is not oned's array", method, v)
	}
	if ok, _ := a[0].(bool); !ok {
		return "", fmt.Errorf("%s: oned: %v", method, a[1])
	}
	body, _ := a[1].(string)
	return body, nil
}

// RPCURL is the front-end's XML-RPC endpoint.
func (s *Stack) RPCURL() string { return fmt.Sprintf("http://127.0.0.1:%d/RPC2", s.Port0()) }
