package onedsim

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Attribute is one attribute of an OpenNebula template: single (Vector is
// nil) or vector (Value is empty).
type Attribute struct {
	Name   string            `json:"name"`
	Value  string            `json:"value,omitempty"`
	Vector map[string]string `json:"vector,omitempty"`
}

// IsVector reports whether a is a vector attribute.
func (a Attribute) IsVector() bool { return a.Vector != nil }

// Template is an OpenNebula template as oned keeps it: a multimap ordered
// by attribute name, attributes of the same name in insertion order.
type Template []Attribute

// Get returns the attributes named name (upper case), in order.
func (t Template) Get(name string) []Attribute {
	var out []Attribute
	for _, a := range t {
		if a.Name == name {
			out = append(out, a)
		}
	}
	return out
}

// Single returns the value of the first single attribute named name.
func (t Template) Single(name string) (string, bool) {
	for _, a := range t {
		if a.Name == name && !a.IsVector() {
			return a.Value, true
		}
	}
	return "", false
}

// add inserts a keeping the multimap order (after the last of its name).
func (t *Template) add(a Attribute) {
	i := sort.Search(len(*t), func(i int) bool { return (*t)[i].Name > a.Name })
	*t = append(*t, Attribute{})
	copy((*t)[i+1:], (*t)[i:])
	(*t)[i] = a
}

// erase removes every attribute named name.
func (t *Template) erase(name string) {
	out := (*t)[:0]
	for _, a := range *t {
		if a.Name != name {
			out = append(out, a)
		}
	}
	*t = out
}

// Merge applies oned's Template::merge (one.vm.update type 1): every
// attribute name present in from first erases all attributes of that name,
// then all attributes of from are added, but an empty vector ("NAME = [ ]")
// only erases (src/template/Template.cc:675-698 of release-7.4.0: a
// VECTOR is set only when its value is not empty).
func (t *Template) Merge(from Template) {
	for _, a := range from {
		t.erase(a.Name)
	}
	for _, a := range from {
		if a.IsVector() && len(a.Vector) == 0 {
			continue
		}
		t.add(a.clone())
	}
}

func (a Attribute) clone() Attribute {
	if a.Vector == nil {
		return a
	}
	v := make(map[string]string, len(a.Vector))
	for k, x := range a.Vector {
		v[k] = x
	}
	a.Vector = v
	return a
}

// attributeName is oned's Attribute constructor: upper case, and "ONE_"
// before names that do not start with a letter or start with "XML".
func attributeName(s string) string {
	s = strings.ToUpper(s)
	if s != "" && (!isAlpha(s[0]) || strings.HasPrefix(s, "XML")) {
		s = "ONE_" + s
	}
	return s
}

func isAlpha(c byte) bool { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') }

// String renders t in OpenNebula template syntax, one attribute per line.
func (t Template) String() string {
	var b strings.Builder
	for _, a := range t {
		if !a.IsVector() {
			fmt.Fprintf(&b, "%s=%s\n", a.Name, quote(a.Value))
			continue
		}
		keys := sortedKeys(a.Vector)
		b.WriteString(a.Name + "=[")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "\n  %s=%s", k, quote(a.Vector[k]))
		}
		b.WriteString(" ]\n")
	}
	return b.String()
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// XML renders t as oned does (Template::to_xml): attributes in multimap
// order, vector values sorted by name, every value in a CDATA section.
func (t Template) XML(root string) string {
	var b strings.Builder
	b.WriteString("<" + root + ">")
	for _, a := range t {
		writeAttr(&b, a)
	}
	b.WriteString("</" + root + ">")
	return b.String()
}

// writeAttr renders one attribute as oned's Attribute::to_xml.
func writeAttr(b *strings.Builder, a Attribute) {
	if !a.IsVector() {
		b.WriteString("<" + a.Name + ">" + cdata(a.Value) + "</" + a.Name + ">")
		return
	}
	b.WriteString("<" + a.Name + ">")
	for _, k := range sortedKeys(a.Vector) {
		if k == "" {
			continue
		}
		b.WriteString("<" + k + ">" + cdata(a.Vector[k]) + "</" + k + ">")
	}
	b.WriteString("</" + a.Name + ">")
}

func cdata(s string) string {
	return "<![CDATA[" + strings.ReplaceAll(s, "]]>", "]]]]><![CDATA[>") + "]]>"
}

// ParseTemplate parses a template given to one.vm.update the way oned's
// Template::parse_str_or_xml does: XML when it starts with '<', otherwise
// the OpenNebula syntax (flex/bison grammar in src/parsers):
//
//	NAME = "value"          # quoted, the only escape is \"
//	NAME = value            # unquoted: no blanks = , [ ] #
//	NAME =                  # empty (end of line)
//	NAME = [ A = "x", B = y ]
//
// Names are upper-cased; the first of repeated vector keys wins.
func ParseTemplate(s string) (Template, error) {
	if strings.HasPrefix(s, "<") {
		return parseTemplateXML(s)
	}
	p := &tparser{s: s}
	var t Template
	for {
		p.skipSpaceAndComments()
		if p.eof() {
			return t, nil
		}
		a, err := p.attribute()
		if err != nil {
			return nil, fmt.Errorf("Parse error: %v", err)
		}
		t.add(a)
	}
}

type tparser struct {
	s   string
	pos int
}

var (
	reVariable    = regexp.MustCompile(`^[[:alnum:]_]+`)
	reQuoted      = regexp.MustCompile(`^"(?:[^"]|\\")*"`)
	reUnquoted    = regexp.MustCompile(`^[^=#\t \n,\[\]]+`)
	reEqualEmpty  = regexp.MustCompile(`^[\t ]*=[\t ]*\n`)
	reEqual       = regexp.MustCompile(`^[\t ]*=[\t ]*`)
	reComma       = regexp.MustCompile(`^[\t \n]*,[\t \n]*`)
	reCloseBrack  = regexp.MustCompile(`^[\t \n]*\][\t \n]*`)
	reOpenBrack   = regexp.MustCompile(`^[\t ]*\[[\t \n]*`)
	reCommentLine = regexp.MustCompile(`^[\t ]*#[^\n]*\n`)
	reBlanks      = regexp.MustCompile(`^[\t \n]+`)
)

func init() { reQuoted.Longest() }

func (p *tparser) eof() bool    { return p.pos >= len(p.s) }
func (p *tparser) rest() string { return p.s[p.pos:] }
func (p *tparser) line() int    { return 1 + strings.Count(p.s[:p.pos], "\n") }
func (p *tparser) errf(f string, a ...any) error {
	return fmt.Errorf("%s at line %d", fmt.Sprintf(f, a...), p.line())
}

func (p *tparser) eat(re *regexp.Regexp) (string, bool) {
	m := re.FindString(p.rest())
	if m == "" {
		return "", false
	}
	p.pos += len(m)
	return m, true
}

func (p *tparser) skipSpaceAndComments() {
	for {
		if _, ok := p.eat(reCommentLine); ok {
			continue
		}
		if _, ok := p.eat(reBlanks); ok {
			continue
		}
		return
	}
}

func (p *tparser) attribute() (Attribute, error) {
	name, ok := p.eat(reVariable)
	if !ok {
		return Attribute{}, p.errf("syntax error, unexpected %q, expecting VARIABLE", head(p.rest()))
	}
	name = attributeName(name)
	if _, ok := p.eat(reEqualEmpty); ok {
		return Attribute{Name: name}, nil
	}
	if _, ok := p.eat(reEqual); !ok {
		return Attribute{}, p.errf("syntax error, unexpected %q, expecting EQUAL", head(p.rest()))
	}
	if _, ok := p.eat(reOpenBrack); ok {
		vec := map[string]string{}
		if _, ok := p.eat(reCloseBrack); ok {
			return Attribute{Name: name, Vector: vec}, nil
		}
		for {
			k, ok := p.eat(reVariable)
			if !ok {
				return Attribute{}, p.errf("syntax error, unexpected %q in vector %s, expecting VARIABLE", head(p.rest()), name)
			}
			if _, ok := p.eat(reEqual); !ok {
				return Attribute{}, p.errf("syntax error, unexpected %q in vector %s, expecting EQUAL", head(p.rest()), name)
			}
			v, err := p.value()
			if err != nil {
				return Attribute{}, err
			}
			k = strings.ToUpper(k)
			if _, dup := vec[k]; !dup {
				vec[k] = v
			}
			if _, ok := p.eat(reCloseBrack); ok {
				return Attribute{Name: name, Vector: vec}, nil
			}
			if _, ok := p.eat(reComma); !ok {
				return Attribute{}, p.errf("syntax error, unexpected %q in vector %s, expecting COMMA or CBRACKET", head(p.rest()), name)
			}
		}
	}
	v, err := p.value()
	if err != nil {
		return Attribute{}, err
	}
	return Attribute{Name: name, Value: v}, nil
}

func (p *tparser) value() (string, error) {
	line, _, _ := strings.Cut(p.rest(), "\n")
	if strings.Contains(line, "]]>") {
		return "", p.errf("syntax error, unexpected CDATA end in value")
	}
	if m, ok := p.eat(reQuoted); ok {
		return strings.ReplaceAll(m[1:len(m)-1], `\"`, `"`), nil
	}
	if m, ok := p.eat(reUnquoted); ok {
		return m, nil
	}
	return "", p.errf("syntax error, unexpected %q, expecting STRING", head(p.rest()))
}

func head(s string) string {
	if s == "" {
		return "end of input"
	}
	if len(s) > 20 {
		s = s[:20]
	}
	return s
}

// parseTemplateXML is Template::from_xml: each child element of the root is
// a single attribute when its content is text only, otherwise a vector whose
// text-only children are the values; empty elements are dropped.
func parseTemplateXML(s string) (Template, error) {
	root, err := parseNode([]byte(s))
	if err != nil {
		return nil, errors.New("Parse error: XML Template malformed.")
	}
	var t Template
	for _, k := range root.Kids {
		name := attributeName(k.Name)
		if len(k.Kids) == 0 {
			if k.Text == "" {
				continue
			}
			t.add(Attribute{Name: name, Value: k.Text})
			continue
		}
		vec := map[string]string{}
		for _, g := range k.Kids {
			if len(g.Kids) == 0 && g.Text != "" {
				vec[g.Name] = g.Text
			}
		}
		t.add(Attribute{Name: name, Vector: vec})
	}
	return t, nil
}

// node is an XML element of a stored VM document.
type node struct {
	Name string
	Text string
	Kids []*node
}

func (n *node) child(name string) *node {
	for _, k := range n.Kids {
		if k.Name == name {
			return k
		}
	}
	return nil
}

func (n *node) text(name string) string {
	if c := n.child(name); c != nil {
		return c.Text
	}
	return ""
}

// parseNode reads an XML document into a tree; whitespace between
// elements is dropped.
func parseNode(doc []byte) (*node, error) {
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var (
		stack []*node
		root  *node
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if root == nil || len(stack) > 0 {
				return nil, errors.New("XML: unexpected end of document")
			}
			return root, nil
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := &node{Name: t.Name.Local}
			if len(stack) == 0 {
				if root != nil {
					return nil, errors.New("XML: more than one root element")
				}
				root = n
			} else {
				p := stack[len(stack)-1]
				p.Kids = append(p.Kids, n)
			}
			stack = append(stack, n)
		case xml.EndElement:
			n := stack[len(stack)-1]
			if len(n.Kids) > 0 {
				n.Text = ""
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].Text += string(t)
			}
		}
	}
}

// writeNode renders n compactly like oned: values inside TEMPLATE,
// USER_TEMPLATE and MONITORING in CDATA sections, other text escaped.
func writeNode(b *strings.Builder, n *node, inTemplate bool) {
	if len(n.Kids) == 0 {
		b.WriteString("<" + n.Name + ">")
		switch {
		case inTemplate:
			b.WriteString(cdata(n.Text))
		case !isTemplateElem(n.Name):
			_ = xml.EscapeText(escWriter{b}, []byte(n.Text))
		}
		b.WriteString("</" + n.Name + ">")
		return
	}
	b.WriteString("<" + n.Name + ">")
	for _, k := range n.Kids {
		writeNode(b, k, inTemplate || isTemplateElem(n.Name))
	}
	b.WriteString("</" + n.Name + ">")
}

func isTemplateElem(name string) bool {
	return name == "TEMPLATE" || name == "USER_TEMPLATE" || name == "MONITORING"
}

type escWriter struct{ b *strings.Builder }

func (w escWriter) Write(p []byte) (int, error) { return w.b.Write(p) }
