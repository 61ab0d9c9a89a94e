package onedsim

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// xmlrpc-c fault codes (oned's XML-RPC server library).
const (
	faultTypeError    = -501
	faultParseError   = -503
	faultNoSuchMethod = -506
)

// i8 marks a value xmlrpc-c sends as <i8> (oned's replication index).
type i8 int64

// rpcCall is a decoded <methodCall>.
type rpcCall struct {
	Method string
	Params []any // string, int64, bool, float64, []byte, []any, map[string]any
}

// decodeCall parses an XML-RPC request body.
func decodeCall(body []byte) (*rpcCall, error) {
	root, err := parseNode(body)
	if err != nil {
		return nil, err
	}
	if root.Name != "methodCall" {
		return nil, fmt.Errorf("root element <%s>, want <methodCall>", root.Name)
	}
	mn := root.child("methodName")
	if mn == nil || strings.TrimSpace(mn.Text) == "" {
		return nil, errors.New("no methodName")
	}
	c := &rpcCall{Method: strings.TrimSpace(mn.Text)}
	if ps := root.child("params"); ps != nil {
		for _, p := range ps.Kids {
			if p.Name != "param" {
				continue
			}
			v := p.child("value")
			if v == nil {
				return nil, errors.New("param without value")
			}
			x, err := decodeValue(v)
			if err != nil {
				return nil, err
			}
			c.Params = append(c.Params, x)
		}
	}
	return c, nil
}

func decodeValue(v *node) (any, error) {
	if len(v.Kids) == 0 {
		return v.Text, nil // untyped value: string
	}
	t := v.Kids[0]
	switch t.Name {
	case "string":
		return t.Text, nil
	case "int", "i4", "i8":
		n, err := strconv.ParseInt(strings.TrimSpace(t.Text), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad <%s> %q", t.Name, t.Text)
		}
		return n, nil
	case "boolean":
		switch strings.TrimSpace(t.Text) {
		case "1":
			return true, nil
		case "0":
			return false, nil
		}
		return nil, fmt.Errorf("bad <boolean> %q", t.Text)
	case "double":
		f, err := strconv.ParseFloat(strings.TrimSpace(t.Text), 64)
		if err != nil {
			return nil, fmt.Errorf("bad <double> %q", t.Text)
		}
		return f, nil
	case "base64":
		return base64.StdEncoding.DecodeString(strings.TrimSpace(t.Text))
	case "array":
		var out []any
		if d := t.child("data"); d != nil {
			for _, k := range d.Kids {
				x, err := decodeValue(k)
				if err != nil {
					return nil, err
				}
				out = append(out, x)
			}
		}
		return out, nil
	case "struct":
		out := map[string]any{}
		for _, m := range t.Kids {
			vn := m.child("value")
			if vn == nil {
				continue
			}
			x, err := decodeValue(vn)
			if err != nil {
				return nil, err
			}
			out[m.text("name")] = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value type <%s>", t.Name)
}

// The response framing of xmlrpc-c, the library behind oned (CRLF lines).
const (
	respHead = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<methodResponse>\r\n"
	respTail = "</methodResponse>\r\n"
)

// encodeResponse renders oned's answer array [v0, v1, ...].
func encodeResponse(vals ...any) []byte {
	var b strings.Builder
	b.WriteString(respHead)
	b.WriteString("<params>\r\n<param><value><array><data>\r\n")
	for _, v := range vals {
		b.WriteString("<value>")
		switch x := v.(type) {
		case bool:
			if x {
				b.WriteString("<boolean>1</boolean>")
			} else {
				b.WriteString("<boolean>0</boolean>")
			}
		case int:
			b.WriteString("<i4>" + strconv.Itoa(x) + "</i4>")
		case i8:
			b.WriteString("<i8>" + strconv.FormatInt(int64(x), 10) + "</i8>")
		case string:
			b.WriteString("<string>" + escapeRPC(x) + "</string>")
		default:
			panic(fmt.Sprintf("onedsim: cannot encode %T", v))
		}
		b.WriteString("</value>\r\n")
	}
	b.WriteString("</data></array></value></param>\r\n</params>\r\n")
	b.WriteString(respTail)
	return []byte(b.String())
}

// encodeFault renders an xmlrpc-c fault (unknown method, bad parameters).
func encodeFault(code int, msg string) []byte {
	var b strings.Builder
	b.WriteString(respHead)
	b.WriteString("<fault>\r\n<value><struct>\r\n")
	b.WriteString("<member><name>faultCode</name>\r\n<value><i4>" + strconv.Itoa(code) + "</i4></value></member>\r\n")
	b.WriteString("<member><name>faultString</name>\r\n<value><string>" + escapeRPC(msg) + "</string></value></member>\r\n")
	b.WriteString("</struct></value>\r\n</fault>\r\n")
	b.WriteString(respTail)
	return []byte(b.String())
}

// escapeRPC escapes string content as xmlrpc-c does.
func escapeRPC(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\r", "&#x0d;").Replace(s)
}
