package onedsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// ControlHandler serves the control API (see the package documentation) for
// a listener of its own, which stays up while the XML-RPC endpoint is down.
func (s *Sim) ControlHandler() http.Handler { return s.controlHandler(false) }

// controlHandler builds the control API; onMain means it shares the
// XML-RPC listener, so "down" needs a "for" duration to come back.
func (s *Sim) controlHandler(onMain bool) http.Handler {
	mux := http.NewServeMux()
	post := func(path string, fn func(w http.ResponseWriter, r *http.Request) error) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "use POST", http.StatusMethodNotAllowed)
				return
			}
			if err := fn(w, r); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			writeJSON(w, map[string]bool{"ok": true})
		})
	}
	get := func(path string, fn func(w http.ResponseWriter, r *http.Request)) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet {
				http.Error(w, "use GET", http.StatusMethodNotAllowed)
				return
			}
			fn(w, r)
		})
	}

	post("/control/delay", func(_ http.ResponseWriter, r *http.Request) error {
		d, err := time.ParseDuration(r.FormValue("d"))
		if err != nil || d < 0 {
			return fmt.Errorf("d=%q: want a duration like 1.5s", r.FormValue("d"))
		}
		s.SetDelay(d)
		return nil
	})
	post("/control/down", func(_ http.ResponseWriter, r *http.Request) error {
		down, err := strconv.ParseBool(r.FormValue("v"))
		if err != nil {
			return fmt.Errorf("v=%q: want true or false", r.FormValue("v"))
		}
		if f := r.FormValue("for"); f != "" {
			d, err := time.ParseDuration(f)
			if err != nil || d <= 0 || !down {
				return fmt.Errorf("for=%q: want a positive duration, with v=true", f)
			}
			if onMain {
				return s.downFor(d, 100*time.Millisecond) // answer this request first
			}
			return s.DownFor(d)
		}
		if down && onMain {
			return fmt.Errorf("down without for= would also take this control API down; add for=DURATION or use the --control-listen address")
		}
		return s.SetDown(down)
	})
	post("/control/fail", func(_ http.ResponseWriter, r *http.Request) error {
		m := r.FormValue("method")
		n, err := strconv.Atoi(r.FormValue("n"))
		if m == "" || err != nil {
			return fmt.Errorf("want method=METHOD&n=COUNT[&code=CODE][&msg=TEXT]")
		}
		code := CodeInternal
		if c := r.FormValue("code"); c != "" {
			v, err := strconv.ParseInt(c, 0, 32)
			if err != nil {
				return fmt.Errorf("code=%q: want an integer (0x2000 or 8192)", c)
			}
			code = int(v)
		}
		s.SetFailCallsWith(m, n, code, r.FormValue("msg"))
		return nil
	})
	post("/control/host", func(_ http.ResponseWriter, r *http.Request) error {
		id, err := strconv.Atoi(r.FormValue("id"))
		state, serr := strconv.Atoi(r.FormValue("state"))
		if err != nil || id < 0 || serr != nil || r.FormValue("name") == "" {
			return fmt.Errorf("want id=ID&name=NAME&state=STATE[&last_monitored=UNIX]")
		}
		h := Host{ID: id, Name: r.FormValue("name"), State: state}
		if lm := r.FormValue("last_monitored"); lm != "" {
			sec, err := strconv.ParseInt(lm, 10, 64)
			if err != nil {
				return fmt.Errorf("last_monitored=%q: want unix seconds", lm)
			}
			h.LastMonitored = time.Unix(sec, 0)
		}
		s.PutHost(h)
		return nil
	})
	post("/control/reset", func(_ http.ResponseWriter, _ *http.Request) error { return s.Reset() })
	mux.HandleFunc("/control/vm", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			id, err := strconv.Atoi(r.FormValue("id"))
			if err != nil {
				http.Error(w, "want id=VMID", http.StatusBadRequest)
				return
			}
			doc, ok := s.VMXML(id)
			if !ok {
				http.Error(w, "no such VM", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "text/xml")
			_, _ = io.WriteString(w, doc)
		case http.MethodPost:
			body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest))
			if err == nil {
				err = s.AddVM(body)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			writeJSON(w, map[string]bool{"ok": true})
		default:
			http.Error(w, "use GET or POST", http.StatusMethodNotAllowed)
		}
	})
	get("/control/updates", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.Updates()) })
	get("/control/user_template", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.FormValue("id"))
		if err != nil {
			http.Error(w, "want id=VMID", http.StatusBadRequest)
			return
		}
		t, ok := s.UserTemplate(id)
		if !ok {
			http.Error(w, "no such VM", http.StatusNotFound)
			return
		}
		if r.FormValue("format") == "text" {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, t.String())
			return
		}
		if t == nil {
			t = Template{}
		}
		writeJSON(w, t)
	})
	get("/control/state", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.state()) })
	return mux
}

// State is the simulator's state as /control/state reports it.
type State struct {
	Delay string         `json:"delay"`
	Down  bool           `json:"down"`
	Fail  map[string]int `json:"fail"`
	Calls map[string]int `json:"calls"`
	VMs   []int          `json:"vms"`
}

func (s *Sim) state() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Delay: s.delay.String(), Down: s.down, Fail: map[string]int{}, Calls: map[string]int{}, VMs: sortedIDs(s.vms)}
	for m, f := range s.fail {
		st.Fail[m] = f.n
	}
	for m, n := range s.calls {
		st.Calls[m] = n
	}
	return st
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
