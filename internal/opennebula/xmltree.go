package opennebula

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxXMLDepth bounds element nesting (a VM document is about 5 deep).
const maxXMLDepth = 64

// xnode is an element of an oned XML document: its local name, its text
// (meaningful for leaves) and its child elements in document order.
type xnode struct {
	name string
	text string
	kids []*xnode
}

// parseXMLTree decodes doc into a tree and checks the root element's name.
// oned writes compact XML with CDATA sections; pretty-printed documents work
// too (whitespace between elements is ignored).
func parseXMLTree(doc []byte, root string) (*xnode, error) {
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	var (
		stack []*xnode
		top   *xnode
		text  []*strings.Builder
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if top != nil && len(stack) == 0 {
				return nil, fmt.Errorf("XML: more than one root element (<%s> after </%s>)", t.Name.Local, top.name)
			}
			if len(stack) >= maxXMLDepth {
				return nil, fmt.Errorf("XML: elements nested deeper than %d", maxXMLDepth)
			}
			n := &xnode{name: t.Name.Local}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.kids = append(p.kids, n)
			} else {
				top = n
			}
			stack = append(stack, n)
			text = append(text, &strings.Builder{})
		case xml.EndElement:
			n := stack[len(stack)-1]
			n.text = text[len(text)-1].String()
			stack = stack[:len(stack)-1]
			text = text[:len(text)-1]
		case xml.CharData:
			if len(stack) == 0 {
				if len(bytes.TrimSpace(t)) > 0 {
					return nil, errors.New("XML: text outside the root element")
				}
				continue
			}
			text[len(text)-1].Write(t)
		}
	}
	if top == nil {
		return nil, errors.New("XML: no root element")
	}
	if top.name != root {
		return nil, fmt.Errorf("XML: root element is <%s>, want <%s>", top.name, root)
	}
	return top, nil
}

// child returns the first child named name, or nil.
func (n *xnode) child(name string) *xnode {
	for _, k := range n.kids {
		if k.name == name {
			return k
		}
	}
	return nil
}

// children returns all children named name.
func (n *xnode) children(name string) []*xnode {
	var out []*xnode
	for _, k := range n.kids {
		if k.name == name {
			out = append(out, k)
		}
	}
	return out
}

// kv is one attribute of a vector attribute.
type kv struct{ k, v string }

// attr is an OpenNebula template attribute: single (vec == nil) or vector.
type attr struct {
	name  string
	value string
	vec   []kv
	isVec bool
}

// get returns the first value of sub-attribute k of a vector attribute.
func (a attr) get(k string) (string, bool) {
	for _, p := range a.vec {
		if p.k == k {
			return p.v, true
		}
	}
	return "", false
}

// template is a TEMPLATE or USER_TEMPLATE in document order.
type template []attr

// templateFrom reads a TEMPLATE-like element the way oned rebuilds a
// template from XML: a child with element children is a vector attribute
// (its leaf children are the values), any other child a single attribute.
func templateFrom(n *xnode) template {
	if n == nil {
		return nil
	}
	t := make(template, 0, len(n.kids))
	for _, k := range n.kids {
		if len(k.kids) == 0 {
			t = append(t, attr{name: k.name, value: k.text})
			continue
		}
		a := attr{name: k.name, isVec: true}
		for _, g := range k.kids {
			if len(g.kids) == 0 {
				a.vec = append(a.vec, kv{g.name, g.text})
			}
		}
		t = append(t, a)
	}
	return t
}

// single returns the value of the first single attribute named name.
func (t template) single(name string) (string, bool) {
	for _, a := range t {
		if a.name == name && !a.isVec {
			return a.value, true
		}
	}
	return "", false
}

// vectors returns the vector attributes named name.
func (t template) vectors(name string) []attr {
	var out []attr
	for _, a := range t {
		if a.name == name && a.isVec {
			out = append(out, a)
		}
	}
	return out
}
