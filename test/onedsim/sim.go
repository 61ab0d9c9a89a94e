package onedsim

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

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

// Version is what one.system.version answers.
const Version = "6.6.0"

// Update is one one.vm.update call as the simulator received it.
type Update struct {
	VMID     int       `json:"vm_id"`
	Template string    `json:"template"`
	Type     int       `json:"type"` // 0 replace, 1 merge
	Time     time.Time `json:"time"`
	Error    string    `json:"error,omitempty"` // oned's message when it failed
}

type failSpec struct {
	n    int
	code int
	msg  string
}

// Sim is an oned stand-in speaking OpenNebula's XML-RPC on /RPC2. Create it
// with New, add VMs, then Start it (or mount Handler yourself).
type Sim struct {
	auth string

	mu      sync.Mutex
	vms     map[int]*vmRec
	hosts   map[int]*hostRec
	delay   time.Duration
	fail    map[string]*failSpec
	updates []Update
	calls   map[string]int
	down    bool

	addr   string
	ln     net.Listener
	srv    *http.Server
	closed bool
}

// New returns a simulator accepting the session "user:password" auth.
func New(auth string) *Sim {
	return &Sim{
		auth:  auth,
		vms:   map[int]*vmRec{},
		fail:  map[string]*failSpec{},
		calls: map[string]int{},
	}
}

// AddVM stores (or replaces) the VMs of a <VM> or <VM_POOL> document.
func (s *Sim) AddVM(doc []byte) error {
	recs, err := parseVMDocs(doc)
	if err != nil {
		return fmt.Errorf("onedsim: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.vms[r.id] = r
	}
	return nil
}

// Put stores the VM built from v.
func (s *Sim) Put(v VM) error { return s.AddVM([]byte(v.XML())) }

// RemoveVM forgets a VM (one.vm.info then fails with NO_EXISTS).
func (s *Sim) RemoveVM(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.vms, id)
}

// VMXML returns the document one.vm.info would return for id.
func (s *Sim) VMXML(id int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[id]
	if !ok {
		return "", false
	}
	return v.full(true), true
}

// UserTemplate returns a copy of the user template of VM id.
func (s *Sim) UserTemplate(id int) (Template, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[id]
	if !ok {
		return nil, false
	}
	out := make(Template, len(v.user))
	for i, a := range v.user {
		out[i] = a.clone()
	}
	return out, true
}

// SetDelay makes every XML-RPC call wait d before it is answered.
func (s *Sim) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetFailCalls makes the next n calls of method fail with an oned INTERNAL
// error (n <= 0 clears it).
func (s *Sim) SetFailCalls(method string, n int) {
	s.SetFailCallsWith(method, n, CodeInternal, "")
}

// SetFailCallsWith makes the next n calls of method fail with oned error
// code (CodeNoExists, CodeLocked...) and message msg (a default when "").
func (s *Sim) SetFailCallsWith(method string, n, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		delete(s.fail, method)
		return
	}
	s.fail[method] = &failSpec{n: n, code: code, msg: msg}
}

// Updates returns the one.vm.update calls received so far.
func (s *Sim) Updates() []Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Update(nil), s.updates...)
}

// Calls returns how many calls of method were received (authenticated or
// not); "" counts all.
func (s *Sim) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if method == "" {
		n := 0
		for _, c := range s.calls {
			n += c
		}
		return n
	}
	return s.calls[method]
}

// Reset clears delay, injected failures, the update history and call
// counters, and brings the endpoint up; VMs are kept.
func (s *Sim) Reset() error {
	s.mu.Lock()
	s.delay = 0
	s.fail = map[string]*failSpec{}
	s.updates = nil
	s.calls = map[string]int{}
	s.mu.Unlock()
	return s.SetDown(false)
}

// Start listens on addr ("127.0.0.1:0" picks a port) and serves Handler.
func (s *Sim) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("onedsim: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addr = ln.Addr().String()
	s.serveLocked(ln)
	return nil
}

func (s *Sim) serveLocked(ln net.Listener) {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.ln, s.srv = ln, srv
	go func() { _ = srv.Serve(ln) }()
}

// Addr returns the listening address ("host:port").
func (s *Sim) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL returns the XML-RPC endpoint, http://ADDR/RPC2.
func (s *Sim) URL() string { return "http://" + s.Addr() + "/RPC2" }

// SetDown(true) closes the listener and every open connection: clients
// get "connection refused". SetDown(false) listens again on the same address.
func (s *Sim) SetDown(down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setDownLocked(down)
}

// setDownLocked changes state. Going down closes the listener and the open
// connections at once (new connections are refused) and drops calls that
// still arrive.
func (s *Sim) setDownLocked(down bool) error {
	if down == s.down || s.closed {
		return nil
	}
	if down {
		s.down = true
		if s.ln != nil {
			_ = s.ln.Close()
		}
		if s.srv != nil {
			_ = s.srv.Close()
		}
		return nil
	}
	if s.addr == "" {
		s.down = false
		return nil
	}
	var (
		ln  net.Listener
		err error
	)
	for i := 0; i < 50; i++ { // the port may linger for a moment
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("onedsim: listen again on %s: %w", s.addr, err)
	}
	s.down = false
	s.serveLocked(ln)
	return nil
}

// dropIfDown closes the connection of a call that arrives while down.
func (s *Sim) dropIfDown(w http.ResponseWriter) bool {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if !down {
		return false
	}
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return true
		}
	}
	panic(http.ErrAbortHandler)
}

// Close stops the server for good.
func (s *Sim) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.srv != nil {
		return s.srv.Close()
	}
	return nil
}

// Handler serves XML-RPC on /RPC2.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/RPC2", s.serveRPC)
	return mux
}

const maxRequest = 16 << 20

func (s *Sim) serveRPC(w http.ResponseWriter, r *http.Request) {
	if s.dropIfDown(w) {
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "405 Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest))
	if err != nil {
		return
	}
	s.mu.Lock()
	delay := s.delay
	s.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	var resp []byte
	call, err := decodeCall(body)
	if err != nil {
		resp = encodeFault(faultParseError, "Call XML not a proper XML-RPC call.  "+err.Error())
	} else {
		resp = s.dispatch(call)
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
	_, _ = w.Write(resp)
}

// method describes one supported call: parameter kinds after the session
// ('i' int, 's' string, 'b' bool) and how many are required.
type method struct {
	params   string
	required int
	fn       func(s *Sim, name string, p []any) []byte
}

var methods = map[string]method{
	"one.vm.info":             {"ib", 1, (*Sim).vmInfo},
	"one.vm.update":           {"isi", 2, (*Sim).vmUpdate},
	"one.vmpool.info":         {"iiiis", 3, (*Sim).vmPoolInfo},
	"one.vmpool.infoextended": {"iiiis", 3, (*Sim).vmPoolInfo},
	"one.system.version":      {"", 0, (*Sim).systemVersion},
	"one.host.info":           {"ib", 1, (*Sim).hostInfo},
	"one.hostpool.info":       {"", 0, (*Sim).hostPoolInfo},
	"one.host.update":         {"isi", 2, (*Sim).hostUpdate},
	"one.hookpool.info":       {"iii", 0, (*Sim).hookPoolInfo},
}

func (s *Sim) dispatch(c *rpcCall) []byte {
	s.mu.Lock()
	s.calls[c.Method]++
	s.mu.Unlock()
	m, ok := methods[c.Method]
	if !ok {
		return encodeFault(faultNoSuchMethod, fmt.Sprintf("Method '%s' not defined", c.Method))
	}
	if len(c.Params) < 1+m.required || len(c.Params) > 1+len(m.params) {
		return encodeFault(faultTypeError, fmt.Sprintf("Wrong number of parameters for %s: %d", c.Method, len(c.Params)))
	}
	session, ok := c.Params[0].(string)
	if !ok {
		return encodeFault(faultTypeError, "Type mismatch: parameter 0 (session) is not a string")
	}
	for i, kind := range m.params {
		if 1+i >= len(c.Params) {
			break
		}
		if !kindOK(kind, c.Params[1+i]) {
			return encodeFault(faultTypeError, fmt.Sprintf("Type mismatch: parameter %d of %s", 1+i, c.Method))
		}
	}
	if session != s.auth {
		return failure(CodeAuthentication, fmt.Sprintf("[%s] User couldn't be authenticated, aborting call.", c.Method), -1)
	}
	s.mu.Lock()
	if f := s.fail[c.Method]; f != nil {
		f.n--
		if f.n <= 0 {
			delete(s.fail, c.Method)
		}
		msg := f.msg
		if msg == "" {
			msg = "Simulated failure."
		}
		code := f.code
		s.mu.Unlock()
		if c.Method == "one.vm.update" {
			s.recordUpdate(c.Params[1:], fmt.Sprintf("[%s] %s", c.Method, msg))
		}
		return failure(code, fmt.Sprintf("[%s] %s", c.Method, msg), -1)
	}
	s.mu.Unlock()
	return m.fn(s, c.Method, c.Params[1:])
}

func kindOK(kind rune, v any) bool {
	switch kind {
	case 'i':
		_, ok := v.(int64)
		return ok
	case 's':
		_, ok := v.(string)
		return ok
	case 'b':
		_, ok := v.(bool)
		return ok
	}
	return false
}

// failure is oned's failure_response: [false, msg, code, resp_id, repl_idx].
func failure(code int, msg string, respID int) []byte {
	return encodeResponse(false, msg, code, respID, i8(0))
}

func intParam(p []any, i, def int) int {
	if i < len(p) {
		return int(p[i].(int64))
	}
	return def
}

func (s *Sim) vmInfo(name string, p []any) []byte {
	id := intParam(p, 0, -1)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[id]
	if !ok {
		return failure(CodeNoExists, fmt.Sprintf("[%s] Error getting virtual machine [%d].", name, id), id)
	}
	return encodeResponse(true, v.full(true), 0)
}

func (s *Sim) recordUpdate(p []any, errMsg string) {
	u := Update{VMID: intParam(p, 0, -1), Type: intParam(p, 2, 0), Time: time.Now(), Error: errMsg}
	if len(p) > 1 {
		u.Template, _ = p[1].(string)
	}
	s.mu.Lock()
	s.updates = append(s.updates, u)
	s.mu.Unlock()
}

func (s *Sim) vmUpdate(name string, p []any) []byte {
	id := intParam(p, 0, -1)
	tmpl, _ := p[1].(string)
	typ := intParam(p, 2, 0)
	fail := func(code int, msg string, respID int) []byte {
		s.recordUpdate(p, msg)
		return failure(code, msg, respID)
	}
	if typ < 0 || typ > 1 {
		return fail(CodeXMLRPCAPI, fmt.Sprintf("[%s] Wrong update type", name), -1)
	}
	s.mu.Lock()
	v, ok := s.vms[id]
	s.mu.Unlock()
	if !ok {
		return fail(CodeNoExists, fmt.Sprintf("[%s] Error getting virtual machine [%d].", name, id), id)
	}
	nt, err := ParseTemplate(tmpl)
	if err != nil {
		// ACTION, as oned's one.vm.update answers a template it cannot
		// parse (src/rm/api/VirtualMachineAPI.cc:281-285 of release-7.4.0,
		// RequestManagerUpdateTemplate.cc:166-168 of 6.10.5); "Cannot
		// update template." (INTERNAL) is for other objects (hosts).
		return fail(CodeAction, fmt.Sprintf("[%s] %v", name, err), id)
	}
	s.mu.Lock()
	if typ == 1 {
		v.user.Merge(nt)
	} else {
		v.user = nt
	}
	s.mu.Unlock()
	s.recordUpdate(p, "")
	return encodeResponse(true, id, 0)
}

// vmPoolInfo implements one.vmpool.info (short documents) and
// one.vmpool.infoextended (full, last HISTORY only) with oned's filter:
// who (-2 all, -3 mine, -1/-4 group, >= 0 a UID), start/end id (-1 open),
// state (-2 any, -1 any but DONE, >= 0 that STATE).
func (s *Sim) vmPoolInfo(name string, p []any) []byte {
	who, start, end, state := intParam(p, 0, -2), intParam(p, 1, -1), intParam(p, 2, -1), intParam(p, 3, -1)
	if who < -4 || state < -2 {
		// no period (src/rm/api/VirtualMachinePoolAPI.cc:171 of release-7.4.0,
		// RequestManagerPoolInfoFilter.cc:207 of 6.10.5; TestStandInMatchesOned)
		return failure(CodeXMLRPCAPI, fmt.Sprintf("[%s] Incorrect filter_flag", name), -1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	b.WriteString("<VM_POOL>")
	for _, id := range sortedIDs(s.vms) {
		v := s.vms[id]
		if (start >= 0 && id < start) || (end >= 0 && id > end) {
			continue
		}
		if (who >= 0 && v.intField("UID") != who) || (who == -3 && v.intField("UID") != 0) {
			continue
		}
		st := v.intField("STATE")
		if (state == -1 && st == StateDone) || (state >= 0 && st != state) {
			continue
		}
		if name == "one.vmpool.info" {
			b.WriteString(v.short())
		} else {
			b.WriteString(v.full(false))
		}
	}
	b.WriteString("</VM_POOL>")
	return encodeResponse(true, b.String(), 0)
}

func (s *Sim) systemVersion(string, []any) []byte {
	return encodeResponse(true, Version, 0)
}

// hookPoolInfo answers one.hookpool.info with an empty pool: the sim runs
// no hooks (test/oned has oned's own).
func (s *Sim) hookPoolInfo(string, []any) []byte {
	return encodeResponse(true, "<HOOK_POOL></HOOK_POOL>", 0)
}
