package hook

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// MarkDir is the directory under state_dir that holds incoming-migration
// marks, one file per domain.
const MarkDir = "migrating"

// clockSkew is how far in the future a mark's time may lie (clock steps)
// and still count as fresh.
const clockSkew = time.Minute

// Marks are the incoming-migration marks of this host: `migrate begin`
// writes <state_dir>/migrating/<domain> with the handover window it
// accepted, the `prepare begin` that follows for that domain fences nothing
// (the source of the migration is legitimately running) only while the
// VM's claim still holds that very window, `release end` and `stopped end`
// remove it, and a mark older than Window counts as absent (and is removed
// when seen).
type Marks struct {
	// Dir is <state_dir>/migrating.
	Dir string
	// Window is how long a mark stays fresh (fence.migration_window).
	Window time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Mark is the content of one mark file.
type Mark struct {
	Domain string    `json:"domain"`
	Time   time.Time `json:"time"`
	Run    string    `json:"run,omitempty"`
	// Window is the claim's handover window the migration was accepted in
	// (nil for a domain that is not an OpenNebula VM). With disks in
	// several clusters it is the first cluster's; every cluster's claim
	// holds its own window of the same premigrate run (engine.Window.Same).
	Window *engine.Window `json:"window,omitempty"`
	// Prepared is when the `prepare begin` of the incoming migration used
	// the mark (zero: not yet). A mark is the handover of one prepare
	// only: a later prepare of the domain (the migration aborted and the
	// domain was started by hand while the mark lived: libvirtd died before
	// `release end`) is judged as a start.
	Prepared time.Time `json:"prepared,omitzero"`
}

func (m Marks) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// plainName are domain names used as file names as they are.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}$`)

// Path returns the mark file of domain: the name itself for ordinary names
// (OpenNebula's one-<ID>), "x-<hex>" for names that could not safely be a
// file name (a '/', a leading dot, control characters, very long).
func (m Marks) Path(domain string) string {
	name := domain
	if !plainName.MatchString(domain) {
		name = "x-" + hex.EncodeToString([]byte(domain))
	}
	return filepath.Join(m.Dir, name)
}

// Set writes the mark of domain (mode 0600, its directory 0700) atomically.
func (m Marks) Set(domain, run string, win *engine.Window) error {
	return m.write(Mark{Domain: domain, Time: m.now().UTC(), Run: run, Window: win})
}

// Use records that the prepare of the incoming migration used mk, the
// domain's mark (see Mark.Prepared).
func (m Marks) Use(mk *Mark) error {
	u := *mk
	u.Prepared = m.now().UTC()
	return m.write(u)
}

// write stores mk atomically.
func (m Marks) write(mk Mark) error {
	domain := mk.Domain
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return fmt.Errorf("migration mark: %w", err)
	}
	if err := os.Chmod(m.Dir, 0o700); err != nil {
		return fmt.Errorf("migration mark: %w", err)
	}
	b, err := json.Marshal(mk)
	if err != nil {
		return err
	}
	path := m.Path(domain)
	f, err := os.CreateTemp(m.Dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("migration mark: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("migration mark %s: %w", path, err)
	}
	return nil
}

// Fresh reports whether domain has a mark younger than Window, and returns
// it. An expired or unreadable mark is removed and reported as absent, so
// that a stale mark can never keep a zombie from being fenced.
func (m Marks) Fresh(domain string) (bool, *Mark, error) {
	path := m.Path(domain)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("migration mark %s: %w", path, err)
	}
	var mk Mark
	if err := json.Unmarshal(b, &mk); err != nil || mk.Time.IsZero() || mk.Domain != domain {
		_ = os.Remove(path)
		return false, nil, nil
	}
	age := m.now().Sub(mk.Time)
	if age < -clockSkew || age >= m.Window {
		_ = os.Remove(path)
		return false, &mk, nil
	}
	return true, &mk, nil
}

// Clear removes the mark of domain; a missing mark is not an error.
func (m Marks) Clear(domain string) error {
	err := os.Remove(m.Path(domain))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("migration mark: %w", err)
	}
	return nil
}
